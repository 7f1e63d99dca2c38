"""The environment a run gets, and the redacted view of it that servepilot records."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"

# Names that carry credentials by convention: HF_TOKEN, OPENAI_API_KEY, WANDB_API_KEY,
# AWS_SECRET_ACCESS_KEY, DB_PASSWORD, PGPASSWORD, MYSQL_PWD, GOOGLE_APPLICATION_CREDENTIALS,
# HTTP_AUTH, and flags such as --api-key and --hf-token. These words are unambiguous
# anywhere in a name:
SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|CREDENTIAL|COOKIE", re.IGNORECASE)
# TOKEN, KEY and AUTH are not: they are also in --max-num-batched-tokens, --tokenizer,
# --author, num_key_value_heads, KEYBOARD, whose values history must keep to compare
# attempts. They count as a whole word, or as the end of one (APIKEY, HFTOKEN, OAUTH).
_SECRET_WORD_ENDINGS = ("TOKEN", "KEY", "AUTH")
_SECRET_WORDS = {"AUTHORIZATION", "BEARER", "PWD", "PASS"}
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


def is_secret(name: str) -> bool:
    if SECRET_NAME.search(name):
        return True
    words = _WORD_SPLIT.split(_CAMEL.sub(r"\1_\2", name).upper().replace("KEY_VALUE", "KV"))
    return any(w.endswith(_SECRET_WORD_ENDINGS) or w in _SECRET_WORDS for w in words if w)


# `scheme://user:password@host`: proxies (HTTPS_PROXY) and rendezvous addresses carry
# credentials in the URL itself, under names that look harmless.
URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]*(?=@)")


def _redact_value(value: str) -> str:
    return URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, value)


def _redact_json(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: (REDACTED if is_secret(str(k)) else _redact_json(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_redact_json(v) for v in obj]
    if isinstance(obj, str):
        return _redact_value(obj)
    return obj


def _redact_word(word: str) -> str:
    """A flag value: JSON objects (vLLM's --hf-overrides, --model-loader-extra-config) get
    their secret-named keys redacted; a JSON-looking value that cannot be parsed is kept
    only when no secret name appears in it (fail closed)."""
    stripped = word.strip()
    name, eq, _ = stripped.partition("=")
    if eq and name.isidentifier() and is_secret(name):
        # NAME=VALUE as a word of its own: a container's `-e HF_TOKEN=...` (launch records
        # the wrapper too), `env HF_TOKEN=... vllm serve` after the first word
        return f"{name}={REDACTED}"
    if stripped[:1] in ("{", "["):
        try:
            parsed = json.loads(stripped)
        except (ValueError, RecursionError):
            names_secret = any(is_secret(w) for w in re.findall(r"[A-Za-z0-9_]+", word))
            return REDACTED if names_secret else _redact_value(word)
        if isinstance(parsed, (dict, list)):
            return json.dumps(_redact_json(parsed))
    return _redact_value(word)


def redact(env: Mapping[str, str]) -> dict[str, str]:
    """The same mapping with the values of secret-looking names replaced."""
    return {k: (REDACTED if is_secret(k) else _redact_value(v)) for k, v in env.items()}


def run_environment(parent: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The full environment the engine process gets: the parent's plus the command's K=V."""
    env = dict(parent)
    env.update({str(k): str(v) for k, v in overrides.items()})
    return env


def environment_diff(parent: Mapping[str, str], child: Mapping[str, str]) -> dict[str, str | None]:
    """What the child's environment sets differently from the parent's, redacted.

    A name the child drops maps to None (recorded so history can show an unset).
    """
    diff: dict[str, str | None] = {}
    for k, v in child.items():
        if parent.get(k) != v:
            diff[k] = v
    for k in parent:
        if k not in child:
            diff[k] = None
    return {
        k: (v if v is None else REDACTED if is_secret(k) else _redact_value(v))
        for k, v in sorted(diff.items())
    }


# Variables the engines, their libraries and the GPU stack read (vLLM's envs.py, SGLang's
# environ.py, NCCL's, CUDA's and Hugging Face's documented variables, ggml's GGML_*). An
# exported VLLM_ATTENTION_BACKEND changes what the engine does as much as a flag does, so
# history records these whether the command set them or the shell had them exported.
RELEVANT_PREFIXES = (
    "VLLM_", "SGLANG_", "SGL_", "NCCL_", "CUDA_", "LLAMA_", "GGML_", "HF_", "HUGGING_FACE_",
    "TRANSFORMERS_", "TOKENIZERS_", "TORCH_", "PYTORCH_", "NVIDIA_", "OMP_", "MKL_", "UCX_",
    "GLOO_", "TRITON_", "FLASHINFER_", "RAY_", "MASTER_", "NVSHMEM_",
)
RELEVANT_NAMES = frozenset({"LD_LIBRARY_PATH", "LD_PRELOAD", "WORLD_SIZE", "RANK", "LOCAL_RANK"})
# Set by servepilot itself on every run (runs/tree.py); differs per attempt by design.
OWN_NAMES = frozenset({"SERVEPILOT_RUN_ID"})


def is_relevant(name: str) -> bool:
    return name in RELEVANT_NAMES or name.startswith(RELEVANT_PREFIXES)


def engine_environment(parent: Mapping[str, str], child: Mapping[str, str]) -> dict[str, str | None]:
    """What history records of the environment the engine saw: every relevant variable it
    has (inherited or set by the command), plus whatever the command changed, redacted."""
    seen = {k: v for k, v in child.items() if is_relevant(k) and k not in OWN_NAMES}
    for k, v in environment_diff(parent, child).items():
        if k not in OWN_NAMES:
            seen[k] = v
    return {
        k: (v if v is None else REDACTED if is_secret(k) else _redact_value(v))
        for k, v in sorted(seen.items())
    }


def redact_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """The command line with the values of secret-looking flags replaced.

    Engines take credentials as flags too (vLLM's `--api-key`, `--hf-token`); the run
    record and history must not keep them. Both `--flag value` and `--flag=value` forms.
    """
    out: list[str] = []
    hide_next = False
    for word in argv:
        if hide_next and not word.startswith("-"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if word.startswith("-"):
            name, eq, _ = word.lstrip("-").partition("=")
            if is_secret(name.replace("-", "_")):
                if eq:
                    out.append(word.split("=", 1)[0] + "=" + REDACTED)
                else:
                    out.append(word)
                    hide_next = True
                continue
            if eq:
                out.append(word.split("=", 1)[0] + "=" + _redact_word(word.split("=", 1)[1]))
                continue
        out.append(_redact_word(word))
    return out


# Shorter values are not scrubbed from text: "1" or "yes" would blank unrelated words.
MIN_SCRUB_LEN = 4


def secret_values(argv: list[str] | tuple[str, ...], env: Mapping[str, str]) -> set[str]:
    """The secret strings themselves (what `redact_argv` and `redact` hide), so text the
    engine echoes (its log, and triage's excerpts of it) can be scrubbed of them too."""
    found = {v for k, v in env.items() if v and is_secret(k)}
    for v in env.values():
        found.update(m.group(0)[len(m.group("head")):] for m in URL_PASSWORD.finditer(v or ""))
    for word, hidden in zip(argv, redact_argv(argv), strict=True):
        if word == hidden:
            continue
        value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        if hidden.endswith("=" + REDACTED) and word.startswith(hidden[: -len(REDACTED)]):
            found.add(word[len(hidden) - len(REDACTED):])  # NAME=VALUE: the value alone
        found.add(value)
        found.update(m.group(0)[len(m.group("head")):] for m in URL_PASSWORD.finditer(value))
        try:
            found.update(_secret_leaves(json.loads(value.strip())))
        except (ValueError, RecursionError):
            pass
    return {v for v in found if len(v) >= MIN_SCRUB_LEN}


def _secret_leaves(obj: Any, under_secret: bool = False) -> set[str]:
    if isinstance(obj, dict):
        out: set[str] = set()
        for k, v in obj.items():
            out |= _secret_leaves(v, under_secret or is_secret(str(k)))
        return out
    if isinstance(obj, list):
        return set().union(*(_secret_leaves(v, under_secret) for v in obj)) if obj else set()
    return {str(obj)} if under_secret and obj is not None else set()


def scrub(obj: Any, values: set[str]) -> Any:
    """`obj` (JSON-like) with every occurrence of the secret `values` in its strings redacted."""
    if not values:
        return obj
    if isinstance(obj, str):
        for v in sorted(values, key=len, reverse=True):
            obj = obj.replace(v, REDACTED)
        return obj
    if isinstance(obj, dict):
        return {k: scrub(v, values) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v, values) for v in obj]
    return obj
