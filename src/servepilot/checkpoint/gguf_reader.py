"""GGUF metadata and tensor infos through the `gguf` package, without reading tensor data.

gguf.GGUFReader memory-maps the file (numpy.memmap) and builds tensor views onto the map,
so only the pages of the key/value section and the tensor-info table are touched. Its reads
are not bounds-checked, though: a truncated file or a hostile array length would raise
anything from IndexError to an endless loop. `_BoundedReader` checks every read against the
file size first, and every failure becomes a HeaderError naming the file.
"""

from __future__ import annotations

import re
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from servepilot.errors import HeaderError, ServepilotError, unreadable_file

GGUF_MAGIC = b"GGUF"
# Arrays up to this many elements are decoded (head counts per layer, rope factors);
# longer ones (token tables, merges) only have their length recorded.
SMALL_ARRAY = 64
SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")


@dataclass
class GGUFFile:
    """Plain-Python facts from one GGUF file (no numpy arrays kept)."""

    path: str
    file_size: int
    metadata: dict  # scalar and short-array fields: key -> value; long arrays: key + "#len" -> length
    tensor_types: dict[str, int] = field(default_factory=dict)  # type name -> tensor count
    elements_by_type: dict[str, int] = field(default_factory=dict)
    tensor_bytes: int = 0
    tensor_count: int = 0
    tensors: list[tuple[str, str, tuple[int, ...], int]] = field(default_factory=list)  # name, type, shape, bytes


def _bounded_reader_class():
    import numpy as np
    from gguf import GGUFReader, GGUFValueType

    class _Truncated(Exception):
        pass

    class _BoundedReader(GGUFReader):
        def _get(self, offset, dtype, count=1, override_order=None):
            count = int(count)
            itemsize = np.dtype(dtype).itemsize
            if offset < 0 or count < 0 or int(offset) + itemsize * count > len(self.data):
                raise _Truncated(f"needs bytes {int(offset):,}..{int(offset) + itemsize * count:,}")
            return super()._get(offset, dtype, count, override_order)

        def _get_field_parts(self, orig_offs, raw_type):
            if raw_type != GGUFValueType.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            raw_itype = self._get(orig_offs, np.uint32)
            alen = self._get(orig_offs + 4, np.uint64)
            n = int(alen[0])
            # An array of n elements takes at least n bytes: refuse lengths the file cannot
            # hold before anything loops over them.
            if n > len(self.data) - orig_offs:
                raise _Truncated(f"array of {n:,} elements at byte {orig_offs:,}")
            if n <= SMALL_ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            # gguf-py walks arrays element by element (a numpy slice each): 12 s for a
            # Qwen3 vocabulary (151,936 tokens + 151,387 merges). Only the length of a long
            # array is kept, so skip over it: numbers in one slice, strings by their lengths.
            itype = GGUFValueType(int(raw_itype[0]))
            start = orig_offs + 12
            nptype = self.gguf_scalar_to_np.get(itype)
            if nptype is not None:
                values = self._get(start, nptype, n)
                end = start + int(values.nbytes)
            elif itype == GGUFValueType.STRING:
                end = self._skip_strings(start, n)
            else:  # arrays of arrays: rare, leave them to gguf-py
                return super()._get_field_parts(orig_offs, raw_type)
            return end - orig_offs, [raw_itype, alen], [1] * n, [GGUFValueType.ARRAY, itype]

        def _skip_strings(self, offs: int, n: int) -> int:
            buf = memoryview(self.data)
            size = len(buf)
            order = "big" if self.byte_order == "S" else "little"
            for _ in range(n):
                if offs + 8 > size:
                    raise _Truncated(f"string length at byte {offs:,}")
                offs += 8 + int.from_bytes(buf[offs:offs + 8], order)
                if offs > size:
                    raise _Truncated(f"string runs past byte {size:,}")
            return offs

    return _BoundedReader, _Truncated


def _value(reader_field):
    """A ReaderField's value as plain Python (strings decoded, scalars unwrapped)."""
    from gguf import GGUFValueType

    types = reader_field.types
    if not types:
        return None
    if types[0] == GGUFValueType.STRING:
        return bytes(reader_field.parts[-1]).decode("utf-8", errors="replace")
    if types[0] == GGUFValueType.ARRAY:
        if len(reader_field.data) > SMALL_ARRAY:
            return None  # token tables and the like: not needed, not kept
        if len(types) > 1 and types[-1] == GGUFValueType.STRING:
            return [bytes(reader_field.parts[i]).decode("utf-8", errors="replace") for i in reader_field.data]
        return [reader_field.parts[i].tolist()[0] for i in reader_field.data]
    return reader_field.parts[-1].tolist()[0]


def read_gguf_file(path: str | Path) -> GGUFFile:
    """One GGUF file's metadata and tensor table; HeaderError for anything malformed."""
    path = Path(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            raise HeaderError("not a regular file", path=path)
        size = st.st_size
        with open(path, "rb") as f:
            magic = f.read(4)
    except HeaderError:
        raise
    except OSError as exc:
        raise unreadable_file(exc, "GGUF file", path, HeaderError) from None
    if magic != GGUF_MAGIC:
        raise HeaderError(f"not a GGUF file: magic is {magic!r}, expected {GGUF_MAGIC!r}", path=path)

    from gguf import GGUFValueType

    reader_cls, truncated = _bounded_reader_class()
    try:
        with warnings.catch_warnings():
            # numpy overflow warnings on hostile dims would otherwise escape as warnings
            warnings.simplefilter("error")
            reader = reader_cls(str(path), "r")
            metadata = {}
            for key, fld in reader.fields.items():
                if key.startswith("GGUF."):
                    continue
                metadata[key] = _value(fld)
                if metadata[key] is None and fld.types and fld.types[0] == GGUFValueType.ARRAY:
                    metadata[key + "#len"] = len(fld.data)  # e.g. the vocabulary size from the token table
            out = GGUFFile(path=str(path), file_size=size, metadata=metadata)
            for t in reader.tensors:
                tname = t.tensor_type.name
                n_elem, n_bytes = int(t.n_elements), int(t.n_bytes)
                out.tensor_types[tname] = out.tensor_types.get(tname, 0) + 1
                out.elements_by_type[tname] = out.elements_by_type.get(tname, 0) + n_elem
                out.tensor_bytes += n_bytes
                out.tensors.append((t.name, tname, tuple(int(d) for d in t.shape), n_bytes))
            out.tensor_count = len(reader.tensors)
            del reader
    except ServepilotError:
        raise
    except truncated as exc:
        raise HeaderError(f"GGUF file is truncated or corrupt ({exc})", path=path) from None
    except Exception as exc:  # noqa: BLE001 - a third-party parser on hostile bytes: any failure is a bad header
        raise HeaderError(f"GGUF header is malformed: {type(exc).__name__}: {str(exc)[:200]}", path=path) from None
    return out


def split_siblings(path: Path) -> tuple[list[Path], list[str]]:
    """All files of a split GGUF (name-0000i-of-0000N.gguf) and the names of missing ones."""
    m = SPLIT_RE.match(path.name)
    if not m:
        return [path], []
    i, n = int(m["i"]), int(m["n"])
    if not 1 <= i <= n:
        raise HeaderError(f"split file name says part {i} of {n}, which cannot be", path=path)
    found: list[Path] = []
    missing: list[str] = []
    for i in range(1, n + 1):
        p = path.with_name(f"{m['stem']}-{i:05d}-of-{n:05d}.gguf")
        if p.is_file():
            found.append(p)
        else:
            missing.append(p.name)
    if path not in found:  # named part that is not a regular file (a FIFO, a directory)
        raise HeaderError("not a regular file", path=path)
    return found, missing
