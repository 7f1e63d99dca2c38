"""Hugging Face model ids → a snapshot directory in the local cache, offline only."""

from __future__ import annotations

import re
from pathlib import Path

from servepilot.errors import BadInput

# huggingface_hub's own rule (utils/_validators.py REPO_ID_REGEX): org/name of [\w.-], no "--" or "..".
MODEL_ID_RE = re.compile(r"^[\w][\w.-]{0,95}/[\w][\w.-]{0,95}$")


class NotCached(BadInput):
    """A model id that is not in the local Hugging Face cache (it may still be on the Hub)."""


def looks_like_model_id(text: str) -> bool:
    return bool(MODEL_ID_RE.match(text)) and "--" not in text and ".." not in text


def split_quant_tag(text: str) -> tuple[str, str | None]:
    """("org/name", "Q4_K_M") from llama.cpp's `-hf org/name:Q4_K_M`; (text, None) otherwise."""
    repo, sep, tag = text.rpartition(":")
    if sep and looks_like_model_id(repo) and re.fullmatch(r"[\w.-]+", tag):
        return repo, tag
    return text, None


def resolve_model_id(model_id: str, revision: str | None = None) -> Path:
    """The cached snapshot of `model_id` (refs/<revision> → snapshots/<commit>); never downloads."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    from servepilot.settings import hf_cache_dir

    cache = hf_cache_dir() or Path(constants.HF_HUB_CACHE)
    try:
        path = snapshot_download(model_id, revision=revision or "main", cache_dir=str(cache), local_files_only=True)
    except LocalEntryNotFoundError:
        raise NotCached(
            f"{model_id!r} is neither a path nor a model in the Hugging Face cache at {cache}",
            hint=f"download it first: hf download {model_id} (or set HF_HUB_CACHE)",
        ) from None
    except Exception as exc:  # noqa: BLE001 - e.g. an invalid repo id: one line, not a traceback
        raise BadInput(f"cannot resolve {model_id!r} in the Hugging Face cache at {cache}: {exc}") from None
    return Path(path)
