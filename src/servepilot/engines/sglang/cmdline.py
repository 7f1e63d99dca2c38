"""SGLang command lines: `python -m sglang.launch_server --model-path ...` and `sglang serve`."""

from __future__ import annotations

from collections.abc import Sequence

from servepilot.engines.progname import basename, python_module

ENGINE = "sglang"
TABLE_PACKAGE = "sglang"
TABLE_KEY = "flags"
MODEL_DEST = "model_path"
SERVED_NAME_DEST = "served_model_name"
CONFIG_FLAG = None


def detect(argv: Sequence[str]) -> tuple[str, int] | None:
    if argv and basename(argv[0]) == "sglang":
        sub = argv[1] if len(argv) > 1 else ""
        return f"sglang {sub}".strip(), 2 if sub else 1
    found = python_module(argv)
    if found and found[0] == "sglang.launch_server":
        return "python -m sglang.launch_server", found[1]
    return None


def check_program(program: str) -> str | None:
    if program.startswith("sglang") and program != "sglang serve":
        sub = program.partition(" ")[2] or "(none)"
        return f"`sglang {sub}` does not start a server: use `sglang serve --model-path MODEL`"
    return None


def model_of(positionals: list[str], options: dict, program: str) -> str | None:
    return options.get("model_path")


def model_positional(program: str) -> bool:
    return False
