"""Read a checkpoint's JSON file, turning every failure into one CheckpointError."""

from __future__ import annotations

import gc
import json
import stat
from pathlib import Path

from servepilot.errors import CheckpointError, not_utf8, unreadable_file

# A config.json or index over this size is not a config: the largest real ones (a full
# weight_map of ~290k tensors) are about 30 MB.
MAX_JSON_BYTES = 256 * 1024 * 1024


def read_json_object(path: str | Path) -> dict:
    """Parse `path` as one JSON object; malformed JSON names the file, line and column."""
    path = Path(path)
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            raise CheckpointError("not a regular file", path=path)
        size = st.st_size
        if size > MAX_JSON_BYTES:
            raise CheckpointError(f"JSON file is {size:,} bytes, over the {MAX_JSON_BYTES:,} byte limit", path=path)
        raw = path.read_bytes()
    except CheckpointError:
        raise
    except OSError as exc:
        raise unreadable_file(exc, "JSON file", path, CheckpointError) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise not_utf8(exc, "JSON file", path, CheckpointError) from None
    try:
        value = loads_without_gc(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(
            f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", path=path
        ) from None
    except RecursionError:
        raise CheckpointError("malformed JSON: nested too deeply", path=path) from None
    except ValueError as exc:  # an integer of over 4300 digits (CPython's int_max_str_digits)
        raise CheckpointError(f"malformed JSON: {exc}", path=path) from None
    if not isinstance(value, dict):
        raise CheckpointError(f"expected a JSON object, found {type(value).__name__}", path=path)
    return value


def loads_without_gc(text: str | bytes):
    """json.loads with the cyclic GC paused: an index or header of ~280k small dicts makes
    the GC rescan the growing heap again and again (measured: 1.65 s vs 0.77 s for 119
    Kimi-K2 headers kept in memory). JSON cannot hold cycles, so nothing is lost."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text)
    finally:
        if was_enabled:
            gc.enable()
