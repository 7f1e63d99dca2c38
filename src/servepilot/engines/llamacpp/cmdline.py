"""llama.cpp command lines: `llama-server -m FILE ...` and `python -m llama_cpp.server --model ...`."""

from __future__ import annotations

from collections.abc import Sequence

from servepilot.engines.progname import basename, python_module

ENGINE = "llama.cpp"
TABLE_PACKAGE = "llamacpp"
MODEL_DEST = "model"
CONFIG_FLAG = None

PYTHON_SERVER = "python -m llama_cpp.server"
# Binaries built from llama.cpp that take common/arg.cpp options; "main" and "server" are the
# names before the 2024 rename to llama-cli / llama-server, accepted only on a llama path.
BINARIES = ("llama-server", "llama-cli")
OLD_BINARIES = ("server", "main")


def detect(argv: Sequence[str]) -> tuple[str, int] | None:
    if not argv:
        return None
    name = basename(argv[0])
    if name in BINARIES:
        return name, 1
    if name in OLD_BINARIES and "llama" in argv[0]:
        return "llama-server" if name == "server" else "llama-cli", 1
    found = python_module(argv)
    if found and found[0] == "llama_cpp.server":
        return PYTHON_SERVER, found[1]
    return None


def table_key(program: str) -> str:
    """llama-cpp-python's server has its own pydantic-made flags (--n_ctx, --n_gpu_layers)."""
    return "python_server_flags" if program == PYTHON_SERVER else "flags"


def served_name_dest(program: str) -> str:
    return "model_alias" if program == PYTHON_SERVER else "alias"


def check_program(program: str) -> str | None:
    return None


def model_of(positionals: list[str], options: dict, program: str) -> str | None:
    return options.get("model") or options.get("hf_repo")


def model_positional(program: str) -> bool:
    return False
