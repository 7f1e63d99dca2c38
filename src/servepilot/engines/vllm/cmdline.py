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
    """`vllm serve MODEL` (vLLM moves `--model X` to the front), or `--model` for the module.

    `python -m vllm.entrypoints.openai.api_server MODEL` parses MODEL as `model_tag` and then
    ignores it: only `vllm serve` copies model_tag to model (vllm/entrypoints/cli/serve.py@v0.16.0),
    so that server starts vLLM's default model instead. See `positional_problem`.
    """
    if program == "vllm serve" and positionals:
        return positionals[0]
    return options.get("model")


def positional_problem(program: str, word: str) -> str:
    if program != "vllm serve":
        return (f"{program} ignores the positional {word!r} (only `vllm serve` reads a positional model): "
                "without --model vLLM serves its default model")
    return f"unexpected argument {word!r}: vLLM's parser rejects stray positional arguments"


def model_positional(program: str) -> bool:
    return program == "vllm serve"


def normalize(options: dict, explicit: set, notes: list[str]) -> None:
    """`--attention-config.backend=X` (or `-ac '{"backend": X}'`) chooses the attention backend
    as `--attention-backend X` does; vLLM refuses both at once
    (vllm/engine/arg_utils.py@v0.16.0 create_engine_config: "mutually exclusive")."""
    config = options.get("attention_config")
    backend = config.get("backend") if isinstance(config, dict) else None
    if backend is None:
        return
    if options.get("attention_backend") is not None:
        notes.append("vLLM rejects --attention-backend together with attention_config.backend (mutually exclusive)")
        return
    options["attention_backend"] = str(backend).upper()
    explicit.add("attention_backend")


def rewrite_changes(changes: dict, unset: list[str], typed: set, options: dict) -> tuple[dict, list[str]]:
    """Change the attention backend where the operator wrote it: inside --attention-config
    when it came from there, so the result never sets both (see `normalize`)."""
    config = options.get("attention_config")
    wants = "attention_backend" in changes or "attention_backend" in unset
    if not wants or "attention_backend" in typed or not isinstance(config, dict) or "backend" not in config:
        return changes, unset
    changes, unset = dict(changes), [u for u in unset if u != "attention_backend"]
    new = dict(changes.get("attention_config") or config)
    if "attention_backend" in changes:
        new["backend"] = changes.pop("attention_backend")
    else:
        new.pop("backend", None)
    if new:
        changes["attention_config"] = new
    else:
        unset.append("attention_config")
    return changes, unset
