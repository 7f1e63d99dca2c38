"""servepilot: serve large open-weight checkpoints on the first try."""

__version__ = "0.1.0"
