"""Packaged YAML data (knowledge, signatures), parsed fast.

Every `check` reads ~200 KB of YAML. PyYAML's pure-Python parser takes ~0.7 s for that and
libyaml's C parser ~0.1 s; a compiled copy (marshal of the parsed data, keyed by a hash of the
text and the Python version) loads in ~1 ms. The compiled copy lives in the user cache
directory (settings.cache_dir); when that is not writable the C parser's result is used as is.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from pathlib import Path
from typing import Any

# Part of the cache key: marshal's format and the parsed form may change with Python.
_FORMAT = f"{sys.version_info[0]}.{sys.version_info[1]}-m{marshal.version}-1"


def resource_path(package: str, name: str) -> Path:
    """The path of packaged file `name` (may contain "/") in `package`. ModuleNotFoundError for
    a package that does not exist. importlib.resources would import tempfile, zipfile and more
    (~20 ms of start-up) for what is, in an installed package, a file next to the module."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"no package {package}")
    return Path(next(iter(spec.submodule_search_locations))) / name


def parse_yaml(text: str) -> Any:
    """YAML text parsed with libyaml's safe C loader when PyYAML has it."""
    import yaml  # lazy: keeps `servepilot --version` fast

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(text, Loader=loader)


def load_yaml_resource(package: str, name: str) -> Any:
    """The parsed YAML of the packaged file `name` in `package`, from the compiled cache
    when it holds this exact text. FileNotFoundError / ModuleNotFoundError pass through."""
    raw = resource_path(package, name).read_bytes()
    key = hashlib.sha256(raw + _FORMAT.encode()).hexdigest()[:32]
    cached = _cache_path(f"{package}.{name}", key)
    if cached is not None:
        try:
            stored = marshal.loads(cached.read_bytes())
            if isinstance(stored, tuple) and len(stored) == 2 and stored[0] == key:
                return stored[1]
        except (OSError, ValueError, EOFError, TypeError):
            pass  # missing or damaged: parse again below
    data = parse_yaml(raw.decode("utf-8"))
    if cached is not None:
        _write(cached, key, data)
    return data


def _cache_path(stem: str, key: str) -> Path | None:
    from servepilot.settings import cache_dir

    try:
        return cache_dir() / "data" / f"{stem}.{key}.marshal"
    except Exception:  # no home directory to derive a cache dir from: parse every time
        return None


def _write(path: Path, key: str, data: Any) -> None:
    """Write the compiled copy atomically; any failure (read-only home, full disk) is ignored.
    The key is stored with the data, so a damaged or foreign file is never taken for it."""
    try:
        blob = marshal.dumps((key, data))
    except ValueError:  # a value marshal cannot hold (YAML timestamps): keep parsing
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
