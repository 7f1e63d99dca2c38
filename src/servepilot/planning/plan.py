"""The memory plan of one deployment: per-GPU weights, runtime, KV budget, KV tokens, fit.

One entry point, `plan_deployment`, returns a frozen `MemoryPlan`; `check` reads its
`summary()` and the memory rules read its fields; `plan` renders it. Each engine's budget
lives in its own module (vllm, sglang, llamacpp); this one picks the engine, the KV dtype,
measured figures from earlier runs, and the alternatives.
"""

from __future__ import annotations

from dataclasses import replace

from servepilot.checkpoint.spec import ModelSpec
from servepilot.deployment import Deployment
from servepilot.errors import BadInput
from servepilot.planning import kv as kvmod
from servepilot.planning.common import attr, gpu_planned_for
from servepilot.planning.options import option
from servepilot.planning.result import Alternative, GpuRow, MemoryPlan

__all__ = ["Alternative", "GpuRow", "MemoryPlan", "plan_deployment"]


def plan_deployment(dep: Deployment, resolution=None, kv_cache_dtype: str | None = None,
                    block_size: int | None = None, tp_options: tuple[int, ...] = (),
                    measured: dict | None = None) -> MemoryPlan:
    """Plan the memory of `dep` on its GPUs.

    kv_cache_dtype / block_size: explicit values win over `resolution` (what the check layer
    resolved), which wins over the command line and the engine defaults. tp_options: other
    TP sizes to plan as alternatives. measured: the launch history's figures for this model,
    engine and GPU kind (runs.store.measurement_for), given by the caller: the planner does not
    read the history itself; they are used when their TP and KV dtype match the plan's.
    BadInput when the model or the GPUs are unknown.
    """
    spec = dep.spec
    if spec is None:
        raise BadInput("the model's config is not readable here, so its memory cannot be planned",
                       hint="run plan where the checkpoint is, or pass a local copy of its config")
    gpu = gpu_planned_for(dep)
    notes: list[str] = list(dep.notes)
    if resolution is None:
        resolution = _try_resolve(dep, notes)
    planner = planner_for(dep.engine)
    dtype = _kv_dtype(dep, spec, resolution, kv_cache_dtype, notes)
    block = block_size or attr(resolution, "block_size")
    backend = attr(resolution, "attention_backend")
    plan = planner(dep, spec, gpu, dtype=dtype, block=block, notes=notes, tp=None, backend=backend)
    measured = _matching(measured, plan)
    if measured is not None:
        plan = _apply_measured(dep, spec, gpu, plan, measured, dtype, block, backend)
    alts = _alternatives(dep, spec, gpu, plan, planner, block, tp_options, backend)
    from servepilot.checkpoint.summary import model_summary

    return replace(plan, alternatives=alts, model_summary=model_summary(spec))



# Each registered engine's budget (planning sits above engines/, so the registry cannot name
# these; tests/test_engine_registry.py checks that every registered engine has one).
# Each imported on first use: a plan imports only its own engine's planner.
def _plan_vllm():
    from servepilot.planning.vllm import plan_vllm

    return plan_vllm


def _plan_sglang():
    from servepilot.planning.sglang import plan_sglang

    return plan_sglang


def _plan_llamacpp():
    from servepilot.planning.llamacpp import plan_llamacpp

    return plan_llamacpp


PLANNERS = {"vllm": _plan_vllm, "sglang": _plan_sglang, "llama.cpp": _plan_llamacpp}


def planner_for(engine: str):
    """The memory planner of an engine (any registered spelling); BadInput when unknown."""
    from servepilot.engines.registry import engine_record

    name = engine_record(engine).name
    if name not in PLANNERS:
        raise BadInput(f"engine {engine!r}: the planner knows {', '.join(PLANNERS)}")
    return PLANNERS[name]()


def _try_resolve(dep: Deployment, notes: list[str]):
    """What the check layer resolves (KV dtype, backend, block size), when it is there."""
    if dep.engine != "vllm":
        return None
    try:
        from servepilot.engines.vllm.resolve import resolve
    except ImportError:
        return None
    try:
        return resolve(dep)
    except Exception as exc:  # a resolve failure is check's finding; the plan goes on without it
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        notes.append(f"engine resolution unavailable ({type(exc).__name__}: {first}); command-line values used")
        return None


def _kv_dtype(dep: Deployment, spec: ModelSpec, resolution, explicit: str | None, notes: list[str]) -> str:
    if explicit:
        return explicit
    forced = attr(resolution, "non_mla_kv_forced")
    if forced and not spec.is_mla:  # compressed-tensors kv_cache_scheme forces fp8 on non-MLA layers
        return str(forced)
    resolved = attr(resolution, "kv_cache_dtype")
    if resolved:
        return str(resolved)
    if dep.engine == "sglang":
        return str(option(dep.launch, "kv_cache_dtype") or "auto")
    given = option(dep.launch, "kv_cache_dtype")
    if given and str(given) != "auto":
        return str(given)
    if spec.kv_cache is not None and dep.engine == "vllm":
        notes.append(f"--kv-cache-dtype auto follows the checkpoint: {spec.kv_cache.dtype} ({spec.kv_cache.where})")
        return spec.kv_cache.dtype
    return "auto"


def _matching(found: dict | None, plan: MemoryPlan) -> dict | None:
    """Measured figures that apply to this plan: the same TP and KV dtype (or unknown ones)."""
    if not found:
        return None
    if found.get("tp") not in (None, plan.tp):
        return None
    if found.get("kv_cache_dtype") not in (None, plan.kv_cache_dtype):
        return None
    return found


def _apply_measured(dep, spec, gpu, plan: MemoryPlan, measured: dict, dtype, block, backend) -> MemoryPlan:
    notes = [*plan.notes, f"measured figures from run {measured.get('run_id')} used"]
    planner = PLANNERS[plan.engine]() if plan.engine in ("vllm", "sglang") else None
    if planner is None:
        return replace(plan, measured=measured, notes=tuple(notes))
    new = planner(dep, spec, gpu, dtype=dtype, block=block, notes=notes, tp=plan.tp,
                  available_override=measured.get("available_kv_bytes"), weights_override=measured.get("weights_bytes"),
                  backend=backend)
    if measured.get("kv_tokens") and measured.get("available_kv_bytes") is None:
        new = replace(new, kv_tokens=int(measured["kv_tokens"]))
    return replace(new, measured=measured)


def _alternatives(dep, spec, gpu, plan: MemoryPlan, planner, block, tp_options, backend) -> tuple[Alternative, ...]:
    """The plan again for each KV dtype option and each TP size asked about."""
    if plan.engine == "llama.cpp":
        return ()
    mdtype = kvmod.model_dtype_name(spec, option(dep.launch, "dtype"))

    def canonical(dt: str) -> str:
        dt = dt.lower()
        if dt == "auto":
            return mdtype
        return "fp8" if dt.startswith("fp8") and dt != "fp8_ds_mla" else dt

    current_dtype = plan.kv_cache_dtype
    dtypes = [current_dtype]
    options = [mdtype, "fp8"] + (["fp8_ds_mla"] if spec.attention is not None and spec.attention.sparse else [])
    for dt in options:
        if canonical(dt) not in {canonical(d) for d in dtypes}:
            dtypes.append(dt)
    tps = [plan.tp, *[t for t in tp_options if t != plan.tp]]
    out = []
    for tp in tps:
        for dt in dtypes:
            is_current = tp == plan.tp and dt == current_dtype
            if is_current:
                p = plan
            else:
                try:
                    p = planner(dep, spec, gpu, dtype=dt, block=block, notes=[], tp=tp, backend=backend)
                except BadInput:
                    continue
            out.append(Alternative(dt, tp, p.bytes_per_token, max((r.weights_bytes for r in p.rows), default=0),
                                   p.available_kv_bytes, p.kv_tokens, p.max_concurrency, p.fits, p.weights_fit,
                                   p.max_model_len_fit, p.longest_context, is_current))
    return tuple(out)
