# Stand-in for the real modeling_kimi_k25.py shipped with the checkpoint: servepilot only hashes
# this file (auto_map custom code runs under --trust-remote-code), it never imports it.
