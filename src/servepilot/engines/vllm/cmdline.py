"""vLLM command lines: `vllm serve MODEL ...` and `python -m vllm.entrypoints.openai.api_server`."""

from __future__ import annotations

from collections.abc import Sequence

from servepilot.engines.progname import basename, python_module

ENGINE = "vllm"
TABLE_PACKAGE = "vllm"
TABLE_KEY = "flags"
MODEL_DEST = "model"
SERVED_NAME_DEST = "served_model_name"
CONFIG_FLAG = "--config"

# Modules that start vLLM's OpenAI-compatible server (the second is the old demo server,
# which takes the same engine arguments).
SERVER_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")


def detect(argv: Sequence[str]) -> tuple[str, int] | None:
    """(program, words it takes) when `argv` starts vLLM's server, else None."""
    if argv and basename(argv[0]) == "vllm":
        sub = argv[1] if len(argv) > 1 else ""
        return f"vllm {sub}".strip(), 2 if sub else 1
    found = python_module(argv)
    if found and found[0] in SERVER_MODULES:
        return f"python -m {found[0]}", found[1]
    if found and found[0] == "vllm.entrypoints.cli.main":
        sub = argv[found[1]] if len(argv) > found[1] else ""
        return f"vllm {sub}".strip(), found[1] + (1 if sub else 0)
    return None


def check_program(program: str) -> str | None:
    """Why `program` is not a server start (None when it is)."""
    if program.startswith("vllm") and program != "vllm serve":
        sub = program.partition(" ")[2] or "(none)"
        return f"`vllm {sub}` does not start a server: the subcommand is `vllm serve MODEL`"
    return None


def model_of(positionals: list[str], options: dict, program: str) -> str | None:
    """`vllm serve MODEL` (vLLM moves `--model X` to the front), or `--model` for the module."""
    if program == "vllm serve" and positionals:
        return positionals[0]
    return options.get("model") or (positionals[0] if positionals else None)


def model_positional(program: str) -> bool:
    return program == "vllm serve"
