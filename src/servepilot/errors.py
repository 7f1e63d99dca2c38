"""Typed errors that carry their context; the CLI turns each into one line (exit 2).

Library code raises these and never prints. `BadInput` is for anything the user handed us
(a file, a command line, a flag) that we cannot use; the message always names the thing.
"""

from __future__ import annotations

from pathlib import Path


class ServepilotError(Exception):
    """Base class: a failure that should reach the user as one clear line."""

    exit_code = 2

    def __init__(self, problem: str, *, path: str | Path | None = None, hint: str | None = None):
        self.problem = problem
        self.path = str(path) if path is not None else None
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = f"{self.path}: " if self.path else ""
        tail = f" ({self.hint})" if self.hint else ""
        return f"{where}{self.problem}{tail}"


class BadInput(ServepilotError):
    """A file, command line or option that servepilot cannot use as given."""


class CheckpointError(BadInput):
    """A checkpoint file that is missing, malformed, truncated or hostile."""


class HeaderError(CheckpointError):
    """A safetensors or GGUF header that cannot be trusted. Fuzzers may only ever see this."""


class CommandLineError(BadInput):
    """An engine command line that cannot be understood."""


class UnknownGpu(BadInput):
    """A --gpu value that matches no catalog entry."""


class LaunchFailed(ServepilotError):
    """A supervised launch ended before the engine became ready."""

    exit_code = 3


def unreadable_file(exc: OSError, what: str, path: str | Path,
                    cls: type[ServepilotError] = BadInput) -> ServepilotError:
    """The one-line error for an OSError met opening or reading a file; `what` names the kind
    of file ("JSON file", "--config file") so every reader words the same failure alike."""
    if isinstance(exc, FileNotFoundError):
        problem = f"{what} does not exist"
    elif isinstance(exc, IsADirectoryError):
        problem = f"is a directory, not a {what}"
    else:
        problem = f"cannot read {what} ({exc.strerror or exc})"
    return cls(problem, path=path)


def not_utf8(exc: UnicodeDecodeError, what: str, path: str | Path,
             cls: type[ServepilotError] = BadInput) -> ServepilotError:
    """The one-line error for a text file that is not UTF-8, with the first bad byte's offset."""
    return cls(f"{what} is not UTF-8 text (byte {exc.start})", path=path)
