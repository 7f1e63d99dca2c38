"""Helpers every engine's planner shares: the GPU planned for, the version, rows, lengths."""

from __future__ import annotations

from servepilot.checkpoint.spec import ModelSpec
from servepilot.deployment import Deployment
from servepilot.errors import BadInput
from servepilot.hardware.cluster import Gpu
from servepilot.planning.facts import fact
from servepilot.planning.result import GpuRow


def derived_max_model_len(spec: ModelSpec) -> int:
    """vLLM's derived max_model_len (config/model.py _get_and_verify_max_len@v0.16.0): the
    smallest length key of the config, scaled by the RoPE factor (yarn: from
    original_max_position_embeddings; not for su / longrope / llama3)."""
    cfg = spec.text_config or spec.config or {}
    keys = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
            "max_sequence_length", "max_seq_length", "seq_len")
    found = [int(cfg[k]) for k in keys if isinstance(cfg.get(k), int | float)]
    if not found and spec.max_position_embeddings:
        found = [spec.max_position_embeddings]
    if not found and spec.gguf and spec.gguf.context_length:
        found = [spec.gguf.context_length]
    length = min(found) if found else 2048
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if isinstance(rope, dict) and "gemma3" not in str(cfg.get("model_type", "")):
        rtype = rope.get("rope_type") or rope.get("type")
        if rtype and rtype not in ("su", "longrope", "llama3", "default") and "factor" in rope:
            if rtype == "yarn" and rope.get("original_max_position_embeddings"):
                length = int(rope["original_max_position_embeddings"])
            length = int(length * float(rope["factor"]))
    return length


def gpu_planned_for(dep: Deployment) -> Gpu:
    usable = [g for g in dep.cluster.gpus if g.memory_bytes and not g.error]
    if not usable:
        raise BadInput("no GPU is known for this plan", hint="pass --gpu, e.g. --gpu h200x8")
    return min(usable, key=lambda g: g.memory_bytes)


def engine_version(dep: Deployment, engine: str) -> tuple[str, bool]:
    from servepilot.planning.facts import release

    if dep.engine_version:
        try:
            return release(dep.engine_version), False
        except ValueError:
            raise BadInput(f"engine version {dep.engine_version!r} is not a version number") from None
    if engine == "vllm":
        return str(fact("vllm", "assumed_version", "0").value), True
    return "0.4.0", True


def older(version: str, than: str) -> bool:
    from packaging.version import Version

    return Version(version) < Version(than)


def attr(obj, name):
    return getattr(obj, name, None) if obj is not None else None


def gpu_rows(dep: Deployment, gpu: Gpu, tp: int, pp: int, dp: int, weights_per_stage, runtime: int, kv_per_stage) -> tuple[GpuRow, ...]:
    """One row per GPU, in vLLM's rank order (dp, pp, tp)."""
    gpus = list(dep.cluster.gpus)
    rows = []
    i = 0
    for d in range(max(1, dp)):
        for s in range(max(1, pp)):
            for t in range(max(1, tp)):
                g = gpus[i] if i < len(gpus) else gpu
                w, k = int(weights_per_stage[s]), int(max(0, kv_per_stage[s]))
                rows.append(GpuRow(i, g.name, s, t, d, g.memory_bytes, w, runtime, k, g.memory_bytes - w - runtime - k))
                i += 1
    return tuple(rows)
