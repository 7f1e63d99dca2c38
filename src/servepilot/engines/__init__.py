"""One subpackage per engine with the same module names: cmdline, knowledge, resolve, logs."""
