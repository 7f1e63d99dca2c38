"""model.safetensors.index.json: total_size and the weight_map's shard names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from servepilot.checkpoint.jsonfile import read_json_object
from servepilot.errors import CheckpointError

INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class SafetensorsIndex:
    path: str
    total_size: int | None
    shards: tuple[str, ...]  # distinct shard file names, in first-seen order
    tensor_count: int


def read_index(path: Path) -> SafetensorsIndex:
    """Parse an index; a weight_map entry that leaves the checkpoint is a CheckpointError."""
    data = read_json_object(path)
    meta = data.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is not None and (type(total) is not int or total < 0):
        # Some exporters write a float; an integral one is still a byte count.
        if isinstance(total, float) and total.is_integer() and total >= 0:
            total = int(total)
        else:
            raise CheckpointError(f"metadata.total_size is {total!r}, not a byte count", path=path)
    weight_map = data.get("weight_map", {})
    if not isinstance(weight_map, dict):
        raise CheckpointError("weight_map is not a JSON object", path=path)
    # ~280k entries naming ~100 files: dedupe at C speed, then check each distinct name once.
    try:
        shards = dict.fromkeys(weight_map.values())
    except TypeError:  # a list or object where a file name belongs
        raise CheckpointError("weight_map values must be shard file names", path=path) from None
    for shard in shards:
        if not isinstance(shard, str) or not shard:
            tensor = next(t for t, s in weight_map.items() if s == shard)
            raise CheckpointError(f"weight_map[{tensor[:100]!r}] is {str(shard)[:100]!r}, not a file name", path=path)
        check_inside(shard, path)
    return SafetensorsIndex(path=str(path), total_size=total, shards=tuple(shards), tensor_count=len(weight_map))


def check_inside(name: str, index_path: Path, tensor: str = "") -> None:
    """Shard names are relative paths inside the checkpoint: no absolute paths, no "..".

    Checked on the name, not the resolved path: in a Hugging Face cache every file is a
    symlink into ../../blobs, which is fine.
    """
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or Path(name).is_absolute() or (len(name) > 1 and name[1] == ":"):
        what = f" (tensor {tensor[:100]!r})" if tensor else ""
        raise CheckpointError(f"weight_map points outside the checkpoint: {name!r}{what}", path=index_path)
