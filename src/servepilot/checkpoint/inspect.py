"""Read a checkpoint (directory, .safetensors, .gguf, config.json or cached model id) into a ModelSpec.

Only JSON files and headers are read. Damage to some shards is collected in
`ModelSpec.problems` (and `weights.damaged`) while the rest is still reported; a path that
cannot be read at all raises a typed error naming it.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

from servepilot.checkpoint import parallel
from servepilot.checkpoint.config import read_architecture, text_tower
from servepilot.checkpoint.customcode import read_custom_code
from servepilot.checkpoint.estimate import estimate_bytes_from_architecture, estimate_params
from servepilot.checkpoint.index import INDEX_NAME, SafetensorsIndex, read_index
from servepilot.checkpoint.jsonfile import read_json_object
from servepilot.checkpoint.quant import read_quantization
from servepilot.checkpoint.safetensors import LazyTensors, ShardSummary, read_safetensors_summary
from servepilot.checkpoint.spec import ModelSpec, WeightsInfo
from servepilot.errors import BadInput, CheckpointError, HeaderError

HF_QUANT_CONFIG = "hf_quant_config.json"
# How many missing or damaged shard names a problem line spells out before "+N more".
SHOW_NAMES = 5


def inspect_path(path: str | Path, revision: str | None = None) -> ModelSpec:
    """A checkpoint directory, one .safetensors or .gguf file, a config.json, or an HF model id
    (from the local cache, else its headers on the Hub; `revision` picks the branch, tag or commit)."""
    if not str(path).strip():
        raise BadInput("empty checkpoint path", hint="give a checkpoint directory, a .safetensors or .gguf file, or a "
                                                     "model id")
    # os.path.expanduser leaves "~nosuchuser" as it is (as the shell does); Path's raises.
    p = Path(os.path.expanduser(path))
    if not p.exists():
        from servepilot.checkpoint.hub import (
            NotCached,
            looks_like_model_id,
            resolve_model_id,
            split_quant_tag,
        )

        repo, quant = split_quant_tag(str(path))
        if quant:  # llama.cpp's -hf REPO:QUANT: one GGUF model of a Hub repository
            from servepilot.checkpoint.remote import inspect_remote

            return inspect_remote(repo, revision, gguf_tag=quant)
        if looks_like_model_id(str(path)):
            from servepilot.checkpoint.remote import inspect_remote, without_weights

            try:
                snapshot = resolve_model_id(str(path), revision)
            except NotCached as not_cached:
                return inspect_remote(str(path), revision, not_cached=not_cached)
            if without_weights(snapshot):  # e.g. only config.json fetched by an earlier tool
                return inspect_remote(str(path), revision)
            return _inspect_dir(snapshot)
        raise BadInput("no such file or directory", path=path)
    if p.is_dir():
        return _inspect_dir(p)
    name = p.name.lower()
    if name.endswith(".gguf"):
        return _inspect_gguf(p)
    if name.endswith(".safetensors"):
        return _inspect_safetensors_file(p)
    if name.endswith(".json"):
        return inspect_config_file(p)
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise BadInput(f"cannot read file: {exc.strerror or exc}", path=p) from None
    if magic == b"GGUF":
        return _inspect_gguf(p)
    raise BadInput("not a checkpoint: expected a directory, a .safetensors, .gguf or config.json file", path=p)


def inspect_config_file(path: str | Path) -> ModelSpec:
    """A lone config.json (any file name); hf_quant_config.json beside a config.json is read too.

    A file that is itself an hf_quant_config.json (producer + quantization, no model_type)
    is reported as a quantization declaration with an unknown architecture.
    """
    p = Path(path)
    config = read_json_object(p)
    hf_quant = None
    if _is_hf_quant_config(config):
        spec = _spec_from_config({}, p.parent, path=p, hf_quant=config)
        return dataclasses.replace(spec, unknown=(f"{p.name} is a quantization config only: architecture unknown",))
    if p.name == "config.json" and (p.parent / HF_QUANT_CONFIG).is_file():
        hf_quant = read_json_object(p.parent / HF_QUANT_CONFIG)
    spec = _spec_from_config(config, p.parent, path=p, hf_quant=hf_quant)
    return _with_estimate(spec)


def _is_hf_quant_config(d: dict) -> bool:
    return isinstance(d.get("quantization"), dict) and "model_type" not in d and "architectures" not in d


def _spec_from_config(config: dict, root: Path, *, path: Path, hf_quant: dict | None) -> ModelSpec:
    from servepilot.checkpoint.layers import ConfigValueError

    try:
        arch = read_architecture(config)
    except ConfigValueError as exc:
        where = path / "config.json" if path.is_dir() else path
        raise CheckpointError(str(exc), path=where) from None
    quant, kv, quant_notes = read_quantization(config, hf_quant)
    code, code_notes, problems = read_custom_code(config, root)
    notes = quant_notes + code_notes
    return ModelSpec(
        path=str(path),
        format="hf",
        architectures=arch.architectures,
        model_type=arch.model_type,
        text_model_type=arch.text_model_type,
        family=arch.family.family if arch.family else None,
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        vocab_size=arch.vocab_size,
        max_position_embeddings=arch.max_position_embeddings,
        dtype=arch.dtype,
        tie_word_embeddings=arch.tie_word_embeddings,
        attention=arch.attention,
        moe=arch.moe,
        mtp_layers=arch.mtp_layers,
        layers=arch.layers,
        quant=quant,
        kv_cache=kv,
        custom_code=code,
        unknown=tuple(arch.notes),
        problems=tuple(problems),
        notes=tuple(notes),
        config=config,
        text_config=text_tower(config) if text_tower(config) is not config else {},
    )


def _with_estimate(spec: ModelSpec) -> ModelSpec:
    """Weights from the architecture when nothing on disk says (source "estimate")."""
    est = estimate_params(spec)
    nbytes = estimate_bytes_from_architecture(spec)
    if est is None or nbytes is None:
        missing = "weights: no shards, no index, and too little in config.json to estimate"
        return dataclasses.replace(spec, unknown=spec.unknown + (missing,))
    weights = WeightsInfo(source="estimate", total_bytes=nbytes, total_params=est.total_with_mtp,
                          estimated=True)
    return dataclasses.replace(spec, weights=weights)


def _inspect_dir(root: Path) -> ModelSpec:
    config_path = root / "config.json"
    if not config_path.exists():
        ggufs = _gguf_models(root)
        if ggufs:
            if len(ggufs) > 1:
                names = ", ".join(p.name for p in ggufs[:SHOW_NAMES])
                raise BadInput(f"holds {len(ggufs)} GGUF models ({names}): name one file", path=root)
            return _inspect_gguf(ggufs[0])
        shards = sorted(root.glob("*.safetensors"))
        if shards:
            weights, problems = _weights_from_results(root, [s.name for s in shards], _scan(shards), index=None)
            return ModelSpec(path=str(root), format="safetensors", weights=weights, problems=tuple(problems),
                             unknown=("no config.json: architecture unknown",))
        raise BadInput("not a checkpoint: no config.json, *.safetensors or *.gguf files", path=root)

    config = read_json_object(config_path)
    hf_quant = read_json_object(root / HF_QUANT_CONFIG) if (root / HF_QUANT_CONFIG).is_file() else None
    spec = _spec_from_config(config, root, path=root, hf_quant=hf_quant)
    weights, problems = _read_weights(root)
    if weights is None:
        return _with_estimate(spec)
    return dataclasses.replace(spec, weights=weights, problems=spec.problems + tuple(problems))


def _read_weights(root: Path) -> tuple[WeightsInfo | None, list[str]]:
    """Headers of the shards present; else the index's total_size; else None (estimate)."""
    index_path = root / INDEX_NAME
    on_disk = sorted(root.glob("*.safetensors"))
    if not index_path.is_file():
        if not on_disk:
            return None, []
        results = _scan(on_disk)
        return _weights_from_results(root, [p.name for p in on_disk], results, index=None)

    index, results = _index_and_scan(index_path, on_disk)
    # Only the shards the index names belong to the model (a directory may also hold e.g.
    # a consolidated.safetensors copy, which engines skip when an index exists).
    for name in index.shards:
        if name not in results and (root / name).is_file():
            results.update(_scan([root / name], names=[name]))
    present = [n for n in index.shards if n in results]
    missing = [n for n in index.shards if n not in results]
    if not present:
        if index.total_size is None:
            return None, []
        return WeightsInfo(source="index", total_bytes=index.total_size, shards=len(index.shards),
                           index_total_bytes=index.total_size), []
    weights, problems = _weights_from_results(root, present, results, index=index)
    if missing:
        problems.insert(0, f"{INDEX_NAME} names {len(missing)} shard(s) that are missing: {_names(missing)}")
    return weights, problems


def _scan(paths: list[Path], names: list[str] | None = None) -> dict[str, ShardSummary | str]:
    """name -> header summary, or the problem that makes the file unreadable."""
    out: dict[str, ShardSummary | str] = {}
    for path, name in zip(paths, names or [p.name for p in paths], strict=True):
        try:
            out[name] = read_safetensors_summary(path)
        except HeaderError as exc:
            out[name] = exc.problem
    return out


def _index_result(index_path: Path):
    """The parsed index, or (problem, hint) of the CheckpointError it raised (picklable)."""
    try:
        return read_index(index_path)
    except CheckpointError as exc:
        return (exc.problem, exc.hint)


def _index_and_scan(index_path: Path, files: list[Path]) -> tuple[SafetensorsIndex, dict[str, ShardSummary | str]]:
    """Parse the index and every shard header; on a big checkpoint, in two processes."""
    index_res = None
    results: dict[str, ShardSummary | str] = {}
    if len(files) >= parallel.MIN_SHARDS and parallel.can_fork():
        # The child takes the index and the first shards, enough that both sides have about
        # the same work. Parse time is proportional to JSON bytes: ~10 ms/MB for a header
        # (parse + validation), ~7 ms/MB for the index's flat weight_map (bench_inspect.py).
        sizes = [_header_size(p) for p in files]
        share = max(0, int(sum(sizes) - 0.7 * index_path.stat().st_size) // 2)
        k, acc = 0, 0
        while k < len(files) and acc + sizes[k] <= share:
            acc += sizes[k]
            k += 1
        child_files, parent_files = files[:k], files[k:]
        child = parallel.Forked(lambda: (_index_result(index_path), _scan(child_files)))
        results.update(_scan(parent_files))
        got = child.result()
        if got is not None:
            index_res, child_results = got
            results.update(child_results)
        files = [] if got is not None else child_files
    if index_res is None:
        index_res = _index_result(index_path)
    results.update(_scan(files))
    if isinstance(index_res, tuple):
        problem, hint = index_res
        raise CheckpointError(problem, path=index_path, hint=hint)
    return index_res, results


def _header_size(path: Path) -> int:
    """The declared header length (8-byte prefix), 0 if unreadable: only used to balance work."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # the reader reports it; never block on a FIFO
            return 0
        with open(path, "rb") as f:
            prefix = f.read(8)
        return int.from_bytes(prefix, "little") if len(prefix) == 8 else 0
    except OSError:
        return 0


def _weights_from_results(root: Path, names: list[str], results: dict, index) -> tuple[WeightsInfo, list[str]]:
    damaged: list[str] = []
    read: list[tuple[str, str]] = []
    counts: dict[str, int] = {}
    total_bytes = 0
    for name in names:
        s = results[name]
        if isinstance(s, str):
            damaged.append(f"{name}: {s}")
            continue
        read.append((str(root / name), name))
        total_bytes += s.data_bytes
        for dtype, n in s.params_by_dtype.items():
            counts[dtype] = counts.get(dtype, 0) + n
    problems = [f"damaged shard {d}" for d in damaged]
    weights = WeightsInfo(
        source="safetensors",
        total_bytes=total_bytes if read else None,
        shards=len(read),
        params_by_dtype=dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        total_params=sum(counts.values()) if read else None,
        damaged=tuple(damaged),
        index_total_bytes=index.total_size if index is not None else None,
        tensors=LazyTensors(read),  # type: ignore[arg-type]  # a lazy Sequence[TensorInfo]
    )
    return weights, problems


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:SHOW_NAMES])
    return shown + (f" (+{len(names) - SHOW_NAMES} more)" if len(names) > SHOW_NAMES else "")


def _inspect_safetensors_file(path: Path) -> ModelSpec:
    s = read_safetensors_summary(path)  # HeaderError for a damaged lone file: exit 2
    weights = WeightsInfo(
        source="safetensors",
        total_bytes=s.data_bytes,
        shards=1,
        params_by_dtype=dict(sorted(s.params_by_dtype.items(), key=lambda kv: -kv[1])),
        total_params=s.total_params,
        tensors=LazyTensors([(str(path), path.name)]),  # type: ignore[arg-type]
    )
    return ModelSpec(path=str(path), format="safetensors", weights=weights,
                     unknown=("a lone safetensors file: no config.json, architecture unknown",))


def _gguf_models(root: Path) -> list[Path]:
    """One path per GGUF model in a directory: split files count once, mmproj files not at all."""
    from servepilot.checkpoint.gguf_reader import SPLIT_RE

    models = []
    for p in sorted(root.glob("*.gguf")):
        if p.name.lower().startswith("mmproj"):
            continue
        m = SPLIT_RE.match(p.name)
        if m and int(m["i"]) != 1:
            continue
        models.append(p)
    return models


def _inspect_gguf(path: Path) -> ModelSpec:
    from servepilot.checkpoint.gguf_spec import spec_from_gguf

    return spec_from_gguf(path)
