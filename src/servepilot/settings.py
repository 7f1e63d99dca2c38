"""Environment settings, read in this one module (STYLE.md habit 8)."""

from __future__ import annotations

import os
from pathlib import Path


def debug_enabled() -> bool:
    """SERVEPILOT_DEBUG=1 turns one-line errors back into tracebacks."""
    return os.environ.get("SERVEPILOT_DEBUG", "") not in ("", "0", "false", "no")


def state_dir() -> Path:
    """Where runs and history live: SERVEPILOT_HOME, else the platform's user state dir."""
    home = os.environ.get("SERVEPILOT_HOME")
    if home:
        return Path(home).expanduser()
    from platformdirs import user_state_path  # lazy: keeps CLI start-up fast

    return Path(user_state_path("servepilot", appauthor=False))


def cache_dir() -> Path:
    """Where compiled copies of packaged data live: SERVEPILOT_CACHE, else under
    SERVEPILOT_HOME when that is set, else the platform's user cache dir."""
    explicit = os.environ.get("SERVEPILOT_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("SERVEPILOT_HOME")
    if home:
        return Path(home).expanduser() / "cache"
    from platformdirs import user_cache_path  # lazy: keeps CLI start-up fast

    return Path(user_cache_path("servepilot", appauthor=False))


def hf_cache_dir() -> Path | None:
    """Explicit Hugging Face cache override, if any (HF_HUB_CACHE / HF_HOME)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return None


def probe_overrides_text() -> str | None:
    """SERVEPILOT_PROBE_OVERRIDES: JSON merged over `servepilot probe`'s findings.

    For what cannot be real on a test machine (Ray's single-machine cluster gives every
    node this host's NICs and no NVML): the probe's output lists every key it took from here.
    """
    return os.environ.get("SERVEPILOT_PROBE_OVERRIDES") or None


def hf_endpoint() -> str:
    """The Hub to read remote models from: HF_ENDPOINT (huggingface_hub's own variable), read
    at call time so a test's fake Hub and a mirror set after import both count."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def hf_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) set: no request to the Hub at all."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "on", "yes", "true")


def remote_cache_dir() -> Path:
    """Where headers read from the Hub are kept, by commit: SERVEPILOT_CACHE, else the
    platform's user cache dir."""
    cache = os.environ.get("SERVEPILOT_CACHE")
    if cache:
        return Path(cache).expanduser() / "hub-headers"
    if os.environ.get("SERVEPILOT_HOME"):
        return state_dir() / "cache" / "hub-headers"
    from platformdirs import user_cache_path  # lazy: keeps CLI start-up fast

    return Path(user_cache_path("servepilot", appauthor=False)) / "hub-headers"


def hub_ref_ttl_seconds() -> float:
    """How long a branch or tag name stays pinned to the commit it resolved to (default one
    hour; SERVEPILOT_HUB_REF_TTL=0 asks the Hub every time). A commit hash never expires."""
    try:
        return max(0.0, float(os.environ.get("SERVEPILOT_HUB_REF_TTL", "3600")))
    except ValueError:
        return 3600.0


def hf_timeout_seconds() -> float:
    """Seconds to wait for the Hub to send data (HF_HUB_DOWNLOAD_TIMEOUT, huggingface_hub's
    own variable; its default is 10)."""
    try:
        return max(0.1, float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT", "10")))
    except ValueError:
        return 10.0
