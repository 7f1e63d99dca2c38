"""How many leading bytes of a GGUF file hold its metadata and tensor-info table.

Reading a GGUF on the Hub means fetching a prefix of the file by HTTP range; the prefix must
reach the end of the tensor-info table, and nothing says where that is until the key/value
section has been walked (a tokenizer's token table alone is megabytes). `metadata_end` walks
the layout of https://github.com/ggml-org/ggml/blob/master/docs/gguf.md over the bytes
fetched so far and says either where the table ends or that more bytes are needed.
"""

from __future__ import annotations

import struct

# Sizes of GGUF scalar value types (gguf.constants.GGUFValueType): 0 u8, 1 i8, 2 u16, 3 i16,
# 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array, 10 u64, 11 i64, 12 f64.
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# Real files have a few hundred keys and under a million tensors; anything far beyond is a
# hostile or corrupt count that would make the walk spin.
MAX_COUNT = 50_000_000


class NeedMore(Exception):
    """The prefix ends inside the metadata: fetch more bytes."""


class NotGGUF(ValueError):
    """The bytes are not a GGUF header servepilot can walk."""


class _Cursor:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise NeedMore
        out = self.data[self.pos : end]
        self.pos = end
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def skip(self, n: int) -> None:
        if self.pos + n > len(self.data):
            raise NeedMore
        self.pos += n

    def string(self) -> None:
        self.skip(self.count())

    def count(self) -> int:
        n = self.u64()
        if n > MAX_COUNT * 64:
            raise NotGGUF(f"length {n:,} is absurd")
        return n


def metadata_end(data: bytes) -> int:
    """Byte offset just past the tensor-info table; NeedMore if `data` stops before it."""
    c = _Cursor(data)
    if c.take(4) != b"GGUF":
        raise NotGGUF("no GGUF magic")
    version = c.u32()
    if version not in (2, 3):
        raise NotGGUF(f"GGUF version {version} (servepilot reads versions 2 and 3)")
    n_tensors, n_kv = c.u64(), c.u64()
    if n_tensors > MAX_COUNT or n_kv > MAX_COUNT:
        raise NotGGUF(f"{n_tensors:,} tensors / {n_kv:,} keys is absurd")
    for _ in range(n_kv):
        c.string()
        _skip_value(c, c.u32())
    for _ in range(n_tensors):
        c.string()
        n_dims = c.u32()
        if n_dims > 8:
            raise NotGGUF(f"tensor with {n_dims} dimensions")
        c.skip(8 * n_dims + 4 + 8)  # dims, type, data offset
    return c.pos


def _skip_value(c: _Cursor, kind: int) -> None:
    if kind in _SCALAR_BYTES:
        c.skip(_SCALAR_BYTES[kind])
    elif kind == _STRING:
        c.string()
    elif kind == _ARRAY:
        item, n = c.u32(), c.count()
        if item in _SCALAR_BYTES:
            c.skip(_SCALAR_BYTES[item] * n)
        else:
            for _ in range(n):
                _skip_value(c, item)
    else:
        raise NotGGUF(f"unknown value type {kind}")
