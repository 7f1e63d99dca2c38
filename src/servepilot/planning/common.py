"""Helpers every engine's planner shares: the GPU planned for, the version, rows, lengths."""

from __future__ import annotations

from servepilot.checkpoint.spec import ModelSpec
from servepilot.deployment import Deployment
from servepilot.errors import BadInput
from servepilot.hardware.cluster import Gpu
from servepilot.planning.facts import fact
from servepilot.planning.result import GpuRow

# vllm/transformers_utils/model_arch_config_convertor.py@v0.18.0 (possible_keys; the same list
# in vllm/config/model.py@v0.16.0 _get_and_verify_max_len): the smallest one present wins.
MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
DEFAULT_MAX_LEN = 2048  # vLLM's default when no key is present


def derived_max_model_len_and_how(spec: ModelSpec) -> tuple[int, str]:
    """vLLM's derived max_model_len and how it was reached: the one derivation that plan, the
    SP-LEN rule, the remedies and rendering all read. The smallest length key of the config
    (vllm/config/model.py _get_and_verify_max_len@v0.16.0/@v0.18.0), scaled by the RoPE factor
    unless the type already includes it (su, longrope, llama3) or the model is Gemma-3; yarn
    starts from original_max_position_embeddings."""
    cfg = spec.text_config or spec.config or {}
    found = [
        (int(cfg[k]), k)
        for k in MAX_LEN_KEYS
        if isinstance(cfg.get(k), int | float) and not isinstance(cfg.get(k), bool) and cfg[k] > 0
    ]
    if not found and spec.max_position_embeddings:
        found = [(spec.max_position_embeddings, "max_position_embeddings")]
    if not found and spec.gguf and spec.gguf.context_length:
        found = [(spec.gguf.context_length, "GGUF context_length")]
    default = (DEFAULT_MAX_LEN, "vLLM's default (no length key in config.json)")
    length, how = min(found) if found else default
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    model_type = str(cfg.get("model_type") or spec.text_model_type or spec.model_type or "")
    if isinstance(rope, dict) and "gemma3" not in model_type:
        rtype = rope.get("rope_type") or rope.get("type")
        factor = rope.get("factor")
        if (
            rtype
            and rtype not in ("su", "longrope", "llama3")
            and isinstance(factor, int | float)
            and factor
        ):
            if rtype == "yarn" and isinstance(rope.get("original_max_position_embeddings"), int):
                length = int(rope["original_max_position_embeddings"])
                how = "original_max_position_embeddings"
            length = int(length * float(factor))
            how = f"{how} x rope_scaling factor {factor:g} ({rtype})"
    return length, how


def derived_max_model_len(spec: ModelSpec) -> int:
    return derived_max_model_len_and_how(spec)[0]


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


# The planner builds one row per rank; the largest deployments run a few thousand GPUs. A
# size beyond this is hostile or a typo and would make the plan loop for ever (issue 17).
MAX_RANKS = 65_536


def refuse_absurd_ranks(tp: int, pp: int, dp: int) -> None:
    """BadInput when tp x pp x dp is more ranks than any deployment has."""
    from servepilot.errors import BadInput

    ranks = max(1, tp) * max(1, pp) * max(1, dp)
    if ranks > MAX_RANKS:
        shown = str(ranks) if ranks < 10**12 else f"a number of {len(str(ranks))} digits"
        raise BadInput(f"the parallel sizes ask for {shown} GPU ranks (tp {_digits(tp)} x pp {_digits(pp)} "
                       f"x dp {_digits(dp)}); more than {MAX_RANKS:,} is not a deployment servepilot can plan",
                       hint="check --tensor-parallel-size, --pipeline-parallel-size and --data-parallel-size")


def _digits(n: int) -> str:
    return str(n) if n < 10**12 else f"<{len(str(n))} digits>"


def gpu_rows(dep: Deployment, gpu: Gpu, tp: int, pp: int, dp: int, weights_per_stage, runtime: int,
             kv_per_stage) -> tuple[GpuRow, ...]:
    """One row per GPU, in vLLM's rank order (dp, pp, tp)."""
    refuse_absurd_ranks(tp, pp, dp)
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
