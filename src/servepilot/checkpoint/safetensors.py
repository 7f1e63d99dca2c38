"""safetensors headers: read only the header bytes, never the tensor data.

Format (https://github.com/huggingface/safetensors#format): 8 bytes little-endian u64 N, then
N bytes of JSON mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
(offsets relative to the byte after the header), plus an optional "__metadata__" string map.

Speed matters: a 1-trillion-parameter checkpoint has ~280k tensors in 119 headers (35 MB of
JSON). json.loads is the floor (0.19 s of CPU on the bench machine); the validation loop adds
0.15 s, and no per-tensor object is built until someone asks for `tensors`.
"""

from __future__ import annotations

import json
import math
import stat
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servepilot.checkpoint.jsonfile import loads_without_gc
from servepilot.checkpoint.spec import TensorInfo
from servepilot.errors import HeaderError, unreadable_file

# The safetensors library itself refuses headers over 100 MB (safetensors/src/tensor.rs
# MAX_HEADER_SIZE); the largest real header we know (Kimi-K2 NVFP4) is under 1 MB per shard.
MAX_HEADER_BYTES = 100_000_000

# Real tensors have at most 5 dimensions; a cap keeps a hostile shape from making math.prod
# multiply millions of big integers.
MAX_DIMS = 32

# Bits per element of every dtype the safetensors format defines (safetensors/src/tensor.rs Dtype).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}


@dataclass(frozen=True)
class ShardSummary:
    """One safetensors file, summarized from its header."""

    path: str
    tensor_count: int
    data_bytes: int  # bytes of tensor data the header describes
    params_by_dtype: dict[str, int]  # elements as stored, per dtype
    metadata: dict = field(default_factory=dict)

    @property
    def total_params(self) -> int:
        return sum(self.params_by_dtype.values())


def read_header_bytes(path: str | Path) -> tuple[bytes, int]:
    """Return (header JSON bytes, file size), checking the length prefix against the file."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError
        if not stat.S_ISREG(mode):  # a FIFO or device would block or never end
            raise HeaderError("not a regular file", path=path)
        with open(path, "rb") as f:
            size = _file_size(f)
            prefix = f.read(8)
            if len(prefix) < 8:
                raise HeaderError(f"safetensors file is {size} bytes, too short for the 8-byte header length",
                                  path=path)
            (n,) = struct.unpack("<Q", prefix)
            if n > MAX_HEADER_BYTES:
                raise HeaderError(f"header length {n:,} is absurd (limit {MAX_HEADER_BYTES:,} bytes)", path=path)
            if 8 + n > size:
                raise HeaderError(f"header length {n:,} runs past the end of the {size:,}-byte file", path=path)
            blob = f.read(n)
    except HeaderError:
        raise
    except OSError as exc:
        raise unreadable_file(exc, "safetensors file", path, HeaderError) from None
    if len(blob) != n:
        raise HeaderError(f"file ended after {len(blob):,} of {n:,} header bytes", path=path)
    return blob, size


def _file_size(f) -> int:
    import os

    return os.fstat(f.fileno()).st_size


def parse_header(blob: bytes, *, path: str | Path) -> dict:
    """JSON-decode a header; anything but a JSON object is a HeaderError."""
    try:
        header = loads_without_gc(blob)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeaderError(f"header is not JSON: {exc}", path=path) from None
    except ValueError as exc:  # an integer of over 4300 digits (CPython's int_max_str_digits)
        raise HeaderError(f"header is not JSON: {exc}", path=path) from None
    except (RecursionError, MemoryError):
        raise HeaderError("header is not JSON: nested too deeply", path=path) from None
    if not isinstance(header, dict):
        raise HeaderError(f"header is JSON {type(header).__name__}, not an object", path=path)
    return header


def _bad(path, name: str, problem: str) -> HeaderError:
    return HeaderError(f"tensor {name[:200]!r}: {problem}", path=path)


def _entry_problem(name: str, entry) -> str:
    """Why one header entry is malformed, in words (the slow path, only run on failure)."""
    if not isinstance(entry, dict):
        return f"entry is {type(entry).__name__}, not an object"
    if not {"dtype", "shape", "data_offsets"} <= entry.keys():
        return "entry lacks dtype, shape or data_offsets"
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        return f"unknown dtype {str(dtype)[:40]!r}"
    if type(shape) is not list or len(shape) > MAX_DIMS or any(type(d) is not int or d < 0 for d in shape):
        return f"shape {str(shape)[:80]} is not a list of at most {MAX_DIMS} non-negative integers"
    if type(offsets) is not list or len(offsets) != 2 or any(type(o) is not int or o < 0 for o in offsets):
        return f"data_offsets {str(offsets)[:80]} is not a [begin, end] pair of non-negative integers"
    begin, end = offsets
    n = math.prod(shape)
    if (end - begin) * 8 != n * DTYPE_BITS[dtype]:
        return f"{dtype} {shape} needs {n * DTYPE_BITS[dtype] / 8:,.0f} bytes, data_offsets span {end - begin:,}"
    return "entry is malformed"


def summarize_header(header: dict, data_len: int, *, path: str | Path, strict_dims: bool = True) -> ShardSummary:
    """Validate every entry of a parsed header against the data section; count elements.

    The checks are those of the safetensors library (tensor.rs `validate`): known dtype,
    non-negative integer shape, data_offsets spanning exactly shape x dtype bytes, the
    tensors tiling the data section from byte 0 to its end without gaps or overlaps.
    The loop is the hot path of `inspect` (~280k entries for a 1T model): the common case
    runs a few cheap checks per entry, and only a failing entry is examined in detail.
    `strict_dims=False` skips the per-dimension type test, which only a JSON true/false can
    fail (math.prod treats them as 1/0): callers pass it when the raw header holds neither.
    """
    counts: dict[str, int] = {}
    prod = math.prod
    bits_of = DTYPE_BITS
    metadata: dict = {}
    last_end = 0
    in_order = True
    tensor_count = 0
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict):
                raise HeaderError("__metadata__ is not a JSON object", path=path)
            metadata = entry
            continue
        try:
            dtype = entry["dtype"]
            shape = entry["shape"]
            begin, end = entry["data_offsets"]
            if type(shape) is not list or len(shape) > MAX_DIMS:
                raise ValueError
            n = prod(shape)  # an int only if every dim is an int (or a bool, checked below)
            bits = bits_of[dtype]
        except Exception:  # noqa: BLE001 - any malformed entry: diagnose it precisely
            raise _bad(path, name, _entry_problem(name, entry)) from None
        if (
            type(n) is not int
            or type(begin) is not int
            or type(end) is not int
            or n * bits != (end - begin) * 8
            or begin < 0
            or (shape and min(shape) < 0)
            or (strict_dims and any(type(d) is not int for d in shape))
        ):
            raise _bad(path, name, _entry_problem(name, entry))
        if begin != last_end:
            in_order = False
        last_end = end
        tensor_count += 1
        counts[dtype] = counts.get(dtype, 0) + n
    if not in_order:
        last_end = _check_tiling(header, path)
    if last_end != data_len:
        if last_end > data_len:
            raise HeaderError(
                f"tensor data ends at byte {last_end:,} but the file's data section has {data_len:,} bytes "
                f"(file truncated or offsets wrong)",
                path=path,
            )
        raise HeaderError(
            f"tensors cover {last_end:,} bytes of a {data_len:,}-byte data section (offsets inconsistent with file "
            "size)",
            path=path,
        )
    return ShardSummary(
        path=str(path),
        tensor_count=tensor_count,
        data_bytes=last_end,
        params_by_dtype=counts,
        metadata=metadata,
    )


def _check_tiling(header: dict, path) -> int:
    """Offsets given out of order: sort them and require the same gap-free tiling."""
    spans = sorted(
        (e["data_offsets"][0], e["data_offsets"][1], name) for name, e in header.items() if name != "__metadata__"
    )
    last_end, last_name = 0, ""
    for begin, end, name in spans:
        if begin < last_end:
            raise _bad(path, name, f"data overlaps tensor {last_name[:200]!r}")
        if begin > last_end:
            raise _bad(path, name, f"data starts at byte {begin:,}, leaving a gap after byte {last_end:,}")
        last_end, last_name = end, name
    return last_end


def read_safetensors_summary(path: str | Path) -> ShardSummary:
    """Read and validate one file's header (never its tensor data)."""
    blob, size = read_header_bytes(path)
    header = parse_header(blob, path=path)
    strict = b"true" in blob or b"false" in blob
    return summarize_header(header, size - 8 - len(blob), path=path, strict_dims=strict)


def read_tensor_infos(path: str | Path, shard: str = "") -> list[TensorInfo]:
    """Every tensor of one file as TensorInfo, in data order."""
    blob, size = read_header_bytes(path)
    header = parse_header(blob, path=path)
    summarize_header(header, size - 8 - len(blob), path=path)  # same validation as inspect
    out = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        out.append((begin, TensorInfo(name=name, dtype=e["dtype"], shape=tuple(e["shape"]),
                                      nbytes=end - begin, shard=shard)))
    out.sort(key=lambda t: t[0])
    return [t for _, t in out]


class LazyTensors(Sequence):
    """TensorInfo for every tensor of some shards, built on first access by re-reading the
    headers. Building 280k frozen dataclasses up front would double `inspect`'s time, and
    most callers only want the totals."""

    def __init__(self, shards: Sequence[tuple[str, str]]):
        self._shards = tuple(shards)  # (path, shard name)
        self._items: tuple[TensorInfo, ...] | None = None

    def _load(self) -> tuple[TensorInfo, ...]:
        if self._items is None:
            items: list[TensorInfo] = []
            for path, name in self._shards:
                items.extend(read_tensor_infos(path, shard=name))
            self._items = tuple(items)
        return self._items

    def __len__(self) -> int:
        return len(self._load())

    def __getitem__(self, i):
        return self._load()[i]

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self._load())

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LazyTensors({len(self._shards)} shards)"
