"""Versioned memory facts of the engines (YAML data files beside this module)."""
