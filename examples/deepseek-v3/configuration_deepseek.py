# Stand-in for the real configuration_deepseek.py shipped with the checkpoint: servepilot only hashes
# this file (auto_map custom code runs under --trust-remote-code), it never imports it.
