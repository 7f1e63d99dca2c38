"""The memory plan of one deployment: per-GPU weights, runtime, KV budget, KV tokens, fit.

One entry point, `plan_deployment`, returns a frozen `MemoryPlan`; `check` reads its
`summary()` and the memory rules read its fields; `plan` renders it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from servepilot.checkpoint.spec import ModelSpec
from servepilot.deployment import Deployment
from servepilot.errors import BadInput
from servepilot.hardware.cluster import Gpu
from servepilot.planning import kv as kvmod
from servepilot.planning.budget import GiB, Term, activation_peak
from servepilot.planning.facts import fact
from servepilot.planning.options import as_bool, as_float, as_int, option, parse_bytes
from servepilot.planning.weights import split_weights


@dataclass(frozen=True)
class GpuRow:
    """One GPU: where its memory goes."""

    index: int
    name: str
    pp_rank: int
    tp_rank: int
    dp_rank: int
    total_bytes: int
    weights_bytes: int
    runtime_bytes: int  # activation peak + non-torch + CUDA graphs + driver-reserved
    kv_bytes: int  # the KV cache the engine allocates (blocks × page × layers)
    free_bytes: int  # what is left (negative: over the GPU)


@dataclass(frozen=True)
class Alternative:
    """The same command with another KV dtype or TP size."""

    kv_cache_dtype: str
    tp: int
    bytes_per_token: int
    weights_per_gpu: int
    available_kv_bytes: int
    kv_tokens: int
    max_concurrency: float
    fits: bool
    weights_fit: bool
    max_model_len_fit: int | None
    longest_context: int
    current: bool = False


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory as the engine computes it, with every term marked exact or estimate."""

    engine: str
    engine_version: str
    version_assumed: bool
    generation: str  # vLLM "v0" | "v1"; "sglang"; "llama.cpp"
    model: str
    gpu: str
    gpu_count: int
    gpu_total_bytes: int
    tp: int
    pp: int
    dp: int
    expert_parallel: bool
    kv_cache_dtype: str
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int | None
    max_num_seqs: int | None
    gpu_memory_utilization: float | None
    bytes_per_token_per_layer: int
    bytes_per_token: int  # per GPU, every attention layer
    page_size_bytes: int
    weights_source: str
    weights_exact: bool
    terms: tuple[Term, ...]
    requested_bytes: int | None
    available_kv_bytes: int
    available_exact: bool
    num_blocks: int
    kv_tokens: int
    max_concurrency: float
    fits: bool  # one max_model_len request fits in the KV cache
    weights_fit: bool  # the weights (and runtime) fit under the engine's memory limit
    max_model_len_fit: int | None  # the engine's suggestion when `fits` is False
    longest_context: int
    kv_groups: int
    rows: tuple[GpuRow, ...]
    alternatives: tuple[Alternative, ...] = ()
    measured: dict | None = None
    notes: tuple[str, ...] = ()
    sources: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.fits and self.weights_fit

    def summary(self) -> dict:
        """The compact form `check --json` carries under "plan"."""
        return {
            "engine": self.engine,
            "engine_version": self.engine_version,
            "gpu": self.gpu,
            "gpu_total_bytes": self.gpu_total_bytes,
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "kv_cache_dtype": self.kv_cache_dtype,
            "block_size": self.block_size,
            "max_model_len": self.max_model_len,
            "weights_per_gpu_bytes": max((r.weights_bytes for r in self.rows), default=0),
            "weights_source": self.weights_source,
            "available_kv_bytes": self.available_kv_bytes,
            "available_exact": self.available_exact,
            "bytes_per_token": self.bytes_per_token,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "fits": self.fits,
            "weights_fit": self.weights_fit,
            "max_model_len_fit": self.max_model_len_fit,
            "longest_context": self.longest_context,
            "measured": self.measured is not None,
            "estimates": [t.name for t in self.terms if not t.exact],
        }


# -- entry point --------------------------------------------------------------------------


def plan_deployment(dep: Deployment, resolution=None, kv_cache_dtype: str | None = None,
                    block_size: int | None = None, tp_options: tuple[int, ...] = (),
                    use_measured: bool = True) -> MemoryPlan:
    """Plan the memory of `dep` on its GPUs.

    kv_cache_dtype / block_size: explicit values win over `resolution` (what the check layer
    resolved), which wins over the command line and the engine defaults. tp_options: other
    TP sizes to plan as alternatives. BadInput when the model or the GPUs are unknown.
    """
    spec = dep.spec
    if spec is None:
        raise BadInput("the model's config is not readable here, so its memory cannot be planned",
                       hint="run plan where the checkpoint is, or pass a local copy of its config")
    gpu = _gpu(dep)
    notes: list[str] = list(dep.notes)
    if resolution is None:
        resolution = _try_resolve(dep, notes)
    engine = dep.engine
    if engine == "vllm":
        planner = _vllm_plan
    elif engine == "sglang":
        planner = _sglang_plan
    elif engine in ("llama.cpp", "llamacpp"):
        planner = _llamacpp_plan
    else:
        raise BadInput(f"engine {engine!r}: the planner knows vllm, sglang and llama.cpp")
    dtype = _kv_dtype(dep, spec, resolution, kv_cache_dtype, notes)
    block = block_size or _attr(resolution, "block_size")
    plan = planner(dep, spec, gpu, dtype=dtype, block=block, notes=notes, tp=None)
    measured = _measured(dep, plan) if use_measured else None
    if measured is not None:
        plan = _apply_measured(dep, spec, gpu, plan, measured, dtype, block)
    alts = _alternatives(dep, spec, gpu, plan, planner, block, tp_options)
    return replace(plan, alternatives=alts)


# -- vLLM ---------------------------------------------------------------------------------


def _vllm_plan(dep, spec: ModelSpec, gpu: Gpu, *, dtype: str, block, notes: list[str], tp,
               available_override: int | None = None, weights_override: int | None = None) -> MemoryPlan:
    launch = dep.launch
    version, assumed = _version(dep, "vllm")
    notes = list(notes)
    sources: list[str] = []

    def f(name):
        row = fact("vllm", name, version)
        sources.append(row.source)
        return row

    generation = f("generation").value
    if generation == "v1" and str(launch.shell.env.get("VLLM_USE_V1", "")) == "0" and _older(version, "0.11.0"):
        generation = "v0"
        notes.append("VLLM_USE_V1=0: the V0 engine sizes the KV cache")
    tp = tp or launch.tensor_parallel_size
    pp, dp = launch.pipeline_parallel_size, launch.data_parallel_size
    ep = as_bool(option(launch, "enable_expert_parallel"))
    util = as_float(option(launch, "gpu_memory_utilization"), "--gpu-memory-utilization") or f("gpu_memory_utilization").value
    block = int(block or as_int(option(launch, "block_size"), "--block-size") or f("block_size").value)
    derived_len = derived_max_model_len(spec)
    max_model_len = as_int(option(launch, "max_model_len"), "--max-model-len")
    auto_fit = max_model_len == -1
    if max_model_len is None or auto_fit:
        max_model_len = derived_len
    reserved = f("driver_reserved_bytes")
    cuda_total = gpu.memory_bytes - int(reserved.value)
    mnbt, mns = _vllm_batch(launch, spec, gpu, cuda_total, generation, max_model_len, f)

    split = split_weights(spec, tp=tp, pp=pp, dp=dp, expert_parallel=ep, vocab_padding=int(f("vocab_padding").value))
    notes.extend(split.notes)
    per_stage = list(split.per_stage)
    if weights_override is not None:
        per_stage = [weights_override] * len(per_stage)

    mdtype = kvmod.model_dtype_name(spec, option(launch, "dtype"))
    act_bytes = 4 if mdtype in ("float32", "float") else 2
    sampler = f("sampler_bytes_per_logit")
    peak, peak_basis = activation_peak(
        spec, tp=tp, expert_parallel=ep, batched_tokens=mnbt, num_seqs=mns,
        sampler_bytes_per_logit=float(sampler.value), moe_chunk_tokens=int(f("fused_moe_chunk_tokens").value),
        act_bytes=act_bytes,
    )
    nt = f("non_torch_bytes")
    after_init = generation == "v1" and f("snapshot_after_distributed_init").value
    non_torch = int(nt.get("base")) + (int(nt.get("per_tp_group")) if tp * pp > 1 and not after_init else 0)
    graphs_subtracted = generation == "v1" and f("cudagraph_subtracted").value
    eager = as_bool(option(launch, "enforce_eager"))
    graphs = 0 if eager else int(f("cudagraph_bytes").value)
    requested = math.ceil(cuda_total * util)
    w_max = max(per_stage)
    w_exact = split.exact or weights_override is not None
    terms = [
        Term("driver_reserved", int(reserved.value), False, int(reserved.get("uncertainty")),
             f"nvidia-smi total − cudaMemGetInfo total; {reserved.source}", subtracted=False),
        Term("weights", w_max, w_exact, 0 if w_exact else int(w_max * 0.03),
             ("measured by a run" if weights_override is not None else f"{split.source}: split for TP {tp}, PP {pp}"
              + (", EP" if ep else ""))),
        Term("activation_peak", peak, False, int(peak * 0.4) + 64 * (1 << 20), peak_basis + f"; {sampler.source}"),
        Term("non_torch", non_torch, False, int(nt.get("uncertainty")), nt.source),
        Term("cuda_graphs", graphs, eager, 0 if eager else int(f("cudagraph_bytes").get("uncertainty")),
             ("--enforce-eager: no graphs" if eager else "captured after the KV cache is allocated, out of the headroom"
              if not graphs_subtracted else "subtracted from the KV budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)"),
             subtracted=graphs_subtracted),
    ]
    kv_bytes_opt = parse_bytes(option(launch, "kv_cache_memory_bytes"), "--kv-cache-memory-bytes")
    subtract = peak + non_torch + (graphs if graphs_subtracted else 0)
    available_per_stage = [requested - w - subtract for w in per_stage]
    available_exact = False
    if kv_bytes_opt:
        available_per_stage = [kv_bytes_opt] * len(per_stage)
        available_exact = True
        notes.append("--kv-cache-memory-bytes: the KV budget is given; profiling does not size it")
    if available_override is not None:
        available_per_stage = [available_override] * len(per_stage)
        available_exact = True
    kv_budget_term = Term(
        "kv_budget", min(available_per_stage), available_exact, 0 if available_exact else
        sum(t.uncertainty_bytes for t in terms if t.subtracted) + int(reserved.get("uncertainty") * util),
        ("--kv-cache-memory-bytes" if kv_bytes_opt else "measured" if available_override is not None else
         f"ceil(total × {util:g}) − weights − activation peak − non-torch" + (" − CUDA graphs" if graphs_subtracted else "")),
    )
    terms.append(kv_budget_term)
    bpl = kvmod.kv_bytes_per_token_per_layer(spec, tp, dtype, mdtype)
    types = kvmod.layer_types(spec)
    hybrid = bool(f("hybrid_kv_cache_manager").value) and not as_bool(option(launch, "disable_hybrid_kv_cache_manager"))
    within_25pct = f("hybrid_group_size").value != "min"
    cap = kvmod.capacity(
        types=types, window=kvmod.sliding_window(spec), bytes_per_token_per_layer=bpl,
        available_per_stage=available_per_stage, block_size=block, max_model_len=max_model_len,
        generation=generation, hybrid=hybrid, max_num_batched_tokens=mnbt, search_limit=derived_len,
        num_gpu_blocks_override=as_int(option(launch, "num_gpu_blocks_override"), "--num-gpu-blocks-override"),
        group_within_25pct=within_25pct,
    )
    if auto_fit:
        notes.append(f"--max-model-len -1: the engine fits the longest context ({cap.longest_context:,})")
        max_model_len = min(max_model_len, cap.longest_context) or max_model_len
    if any(k in (spec.config or {}) for k in ("vision_config", "audio_config")) and not kv_bytes_opt:
        notes.append("multimodal model: vLLM also profiles the encoder with dummy images/audio; that peak is not in the estimate")
    if "sliding" in types and generation == "v1" and hybrid:
        notes.append("sliding-window layers: 'GPU KV cache size' counts every layer; a long request holds only the window in sliding layers")
    if kv_bytes_opt:
        # the given KV cache, weights and the profile peak must fit on the GPU itself
        weights_fit = all(w + subtract + kv_bytes_opt <= cuda_total for w in per_stage)
    else:
        weights_fit = all(w + subtract < requested for w in per_stage) and min(available_per_stage) > 0
    rows = _rows(dep, gpu, tp, pp, dp, per_stage, peak + non_torch + graphs + int(reserved.value),
                 [cap.num_blocks * cap.page_size_bytes * _layers_on(types, pp, s, generation, hybrid, within_25pct)
                  for s in range(pp)])
    if assumed:
        notes.append(f"engine version unknown: vLLM {version} rules assumed (pass --engine-version)")
    return MemoryPlan(
        engine="vllm", engine_version=version, version_assumed=assumed, generation=generation,
        model=spec.name, gpu=gpu.name, gpu_count=max(1, dep.cluster.count), gpu_total_bytes=gpu.memory_bytes,
        tp=tp, pp=pp, dp=dp, expert_parallel=ep, kv_cache_dtype=dtype, block_size=block,
        max_model_len=max_model_len, max_num_batched_tokens=mnbt, max_num_seqs=mns, gpu_memory_utilization=util,
        bytes_per_token_per_layer=bpl, bytes_per_token=bpl * len(types), page_size_bytes=cap.page_size_bytes,
        weights_source="measured" if weights_override is not None else split.source, weights_exact=w_exact,
        terms=tuple(terms), requested_bytes=requested, available_kv_bytes=min(available_per_stage),
        available_exact=available_exact, num_blocks=cap.num_blocks, kv_tokens=cap.kv_tokens,
        max_concurrency=cap.max_concurrency, fits=cap.fits, weights_fit=weights_fit,
        max_model_len_fit=cap.max_model_len_fit, longest_context=cap.longest_context, kv_groups=cap.groups,
        rows=rows, notes=tuple(dict.fromkeys(notes)), sources=tuple(dict.fromkeys(sources)),
    )


def _vllm_batch(launch, spec: ModelSpec, gpu: Gpu, cuda_total: int, generation: str, max_model_len: int, f):
    """max_num_batched_tokens and max_num_seqs as EngineArgs defaults them for `vllm serve`."""
    mnbt = as_int(option(launch, "max_num_batched_tokens"), "--max-num-batched-tokens")
    mns = as_int(option(launch, "max_num_seqs"), "--max-num-seqs")
    chunked_opt = option(launch, "enable_chunked_prefill")
    if generation == "v0":
        d = f("v0_batch_defaults")
        mns = mns or int(d.get("max_num_seqs"))
        if chunked_opt is None:
            chunked = max_model_len > 32768 and not spec.is_mla and kvmod.sliding_window(spec) is None
        else:
            chunked = as_bool(chunked_opt)
        if mnbt is None:
            mnbt = int(d.get("chunked_max_num_batched_tokens")) if chunked else max(max_model_len, 2048)
        return mnbt, mns
    d = f("v1_batch_defaults")
    large = cuda_total >= 70 * GiB and "a100" not in (gpu.name or "").lower() and "a100" not in (gpu.key or "")
    defaults = d.get("large" if large else "small")
    if mnbt is None:
        mnbt = int(defaults["max_num_batched_tokens"])
        if chunked_opt is not None and not as_bool(chunked_opt):
            mnbt = max(max_model_len, mnbt)
        mnbt = min((mns or int(defaults["max_num_seqs"])) * max_model_len, mnbt)
    if mns is None:
        mns = min(int(defaults["max_num_seqs"]), mnbt)
    return mnbt, mns


def _layers_on(types, pp: int, stage: int, generation: str, hybrid: bool, within_25pct: bool) -> int:
    """Layers' worth of pages the engine allocates on one GPU of `stage` (group size × groups)."""
    rng = kvmod.pp_layer_ranges(len(types), pp)[stage]
    groups = kvmod.kv_groups(types, hybrid and generation == "v1", within_25pct)
    group_size = max((sum(1 for i in g if i in rng) for _, g in groups), default=0)
    return group_size * len(groups) if len(groups) > 1 else len(rng)


# -- SGLang -------------------------------------------------------------------------------


def _sglang_plan(dep, spec: ModelSpec, gpu: Gpu, *, dtype: str, block, notes: list[str], tp,
                 available_override: int | None = None, weights_override: int | None = None) -> MemoryPlan:
    launch = dep.launch
    version, assumed = _version(dep, "sglang")
    notes = list(notes)
    tp = tp or int(as_int(option(launch, "tp_size", "tensor_parallel_size"), "--tp-size") or 1)
    pp = int(as_int(option(launch, "pp_size"), "--pp-size") or 1)
    dp = int(as_int(option(launch, "dp_size"), "--dp-size") or 1)
    ep = (as_int(option(launch, "ep_size"), "--ep-size") or 1) > 1
    mfs = as_float(option(launch, "mem_fraction_static"), "--mem-fraction-static")
    table = fact("sglang", "mem_fraction_static_by_tp", version)
    sources = [table.source]
    mfs_exact = mfs is not None
    if mfs is None:
        mfs = next(v for t, v in table.get("table") if tp >= t)
        notes.append(f"--mem-fraction-static not given: {mfs} assumed for TP {tp} (newer SGLang derives it from GPU memory)")
    ctx = fact("sglang", "cuda_context_bytes", version)
    reserved = fact("vllm", "driver_reserved_bytes", "0")  # one value for every version
    cuda_total = gpu.memory_bytes - int(reserved.value)
    split = split_weights(spec, tp=tp, pp=pp, dp=dp, expert_parallel=ep)
    notes.extend(split.notes)
    w = weights_override if weights_override is not None else split.max_per_gpu
    available = int(cuda_total * mfs) - w - int(ctx.value)
    if available_override is not None:
        available = available_override
    terms = (
        Term("driver_reserved", int(reserved.value), False, int(reserved.get("uncertainty")), reserved.source, subtracted=False),
        Term("weights", w, split.exact or weights_override is not None, 0 if split.exact else int(w * 0.03), split.source),
        Term("cuda_context", int(ctx.value), False, int(ctx.get("uncertainty")), ctx.source),
        Term("kv_budget", available, available_override is not None, int(ctx.get("uncertainty")),
             f"total × mem_fraction_static ({mfs:g}{'' if mfs_exact else ', assumed'}) − weights − CUDA context"),
    )
    bpl = kvmod.kv_bytes_per_token_per_layer(spec, tp, dtype)
    types = kvmod.layer_types(spec)
    cell = bpl * len(types)
    tokens = max(0, available) // cell if cell else 0
    max_model_len = as_int(option(launch, "context_length"), "--context-length") or derived_max_model_len(spec)
    runtime = int(cuda_total * (1 - mfs)) + int(reserved.value)
    rows = _rows(dep, gpu, tp, pp, dp, [w] * pp, runtime, [tokens * cell] * pp)
    if assumed:
        notes.append(f"engine version unknown: SGLang {version} assumed")
    return MemoryPlan(
        engine="sglang", engine_version=version, version_assumed=assumed, generation="sglang",
        model=spec.name, gpu=gpu.name, gpu_count=max(1, dep.cluster.count), gpu_total_bytes=gpu.memory_bytes,
        tp=tp, pp=pp, dp=dp, expert_parallel=ep, kv_cache_dtype=dtype, block_size=1, max_model_len=max_model_len,
        max_num_batched_tokens=None, max_num_seqs=None, gpu_memory_utilization=mfs,
        bytes_per_token_per_layer=bpl, bytes_per_token=cell, page_size_bytes=bpl, weights_source=split.source,
        weights_exact=split.exact, terms=terms, requested_bytes=int(cuda_total * mfs), available_kv_bytes=available,
        available_exact=available_override is not None, num_blocks=tokens, kv_tokens=tokens,
        max_concurrency=tokens / max_model_len if max_model_len else 0.0, fits=tokens >= max_model_len,
        weights_fit=available > 0, max_model_len_fit=None if tokens >= max_model_len else tokens,
        longest_context=tokens, kv_groups=1, rows=rows, notes=tuple(dict.fromkeys(notes)), sources=tuple(sources),
    )


# -- llama.cpp ----------------------------------------------------------------------------

# Bytes per element of llama.cpp cache types (ggml block sizes: q8_0 = 34 B per 32 values).
_GGML_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
               "q5_0": 22 / 32, "q5_1": 24 / 32, "iq4_nl": 18 / 32}


def _llamacpp_plan(dep, spec: ModelSpec, gpu: Gpu, *, dtype: str, block, notes: list[str], tp,
                   available_override: int | None = None, weights_override: int | None = None) -> MemoryPlan:
    launch = dep.launch
    notes = list(notes)
    att = spec.attention
    if att is None:
        raise BadInput(f"{spec.path}: the attention geometry is unknown, so llama.cpp's KV cache cannot be sized")
    n_layer = att.num_layers
    n_ctx = as_int(option(launch, "ctx_size", "ctx-size", "n_ctx", "c"), "--ctx-size")
    if not n_ctx:
        n_ctx = spec.gguf.context_length if spec.gguf and spec.gguf.context_length else derived_max_model_len(spec)
        notes.append(f"--ctx-size not given (or 0): the model's training context {n_ctx:,} assumed (older builds default to 4096 / 512)")
    ngl_raw = option(launch, "n_gpu_layers", "n-gpu-layers", "gpu_layers", "ngl")
    all_layers = str(ngl_raw).strip().lower() in ("auto", "all", "-1")  # newer builds' spellings of "every layer"
    ngl = n_layer + 1 if all_layers else as_int(ngl_raw, "--n-gpu-layers")
    if ngl is None:
        ngl = n_layer + 1
        notes.append("--n-gpu-layers not given: all layers assumed on the GPU (the default differs by build)")
    on_gpu = min(ngl, n_layer)
    type_k = str(option(launch, "cache_type_k", "cache-type-k", "ctk") or "f16").lower()
    type_v = str(option(launch, "cache_type_v", "cache-type-v", "ctv") or "f16").lower()
    for t in (type_k, type_v):
        if t not in _GGML_BYTES:
            raise BadInput(f"llama.cpp cache type {t!r} is not one the planner knows ({', '.join(_GGML_BYTES)})")
    kv_heads = att.num_kv_heads if att.kind != "mla" else 1
    k_dim = kv_heads * (att.head_dim if att.kind != "mla" else (att.mla_head_size or att.head_dim))
    v_dim = kv_heads * (att.v_head_dim or att.head_dim) if att.kind != "mla" else (att.kv_lora_rank or 0)
    bpl = int(k_dim * _GGML_BYTES[type_k] + v_dim * _GGML_BYTES[type_v])
    n_gpus = max(1, dep.cluster.count)
    file_bytes = (spec.gguf.file_size if spec.gguf else None) or (spec.weights.total_bytes if spec.weights else None)
    if file_bytes is None:
        raise BadInput(f"{spec.path}: the GGUF size is unknown")
    weights = weights_override if weights_override is not None else int(file_bytes * min(ngl, n_layer + 1) / (n_layer + 1) / n_gpus)
    kv_total = n_ctx * on_gpu * bpl
    kv_gpu = cdiv_int(kv_total, n_gpus)
    compute = 512 * (1 << 20)
    total = gpu.memory_bytes
    free = total - weights - kv_gpu - compute
    terms = (
        Term("weights", weights, False, int(weights * 0.02), f"GGUF size × {min(ngl, n_layer + 1)}/{n_layer + 1} offloaded layers / {n_gpus} GPU(s)"),
        Term("kv_cache", kv_gpu, True, 0, f"n_ctx {n_ctx:,} × {on_gpu} layers × {bpl:,} B (K {type_k}, V {type_v})"),
        Term("compute_buffer", compute, False, compute, "llama.cpp compute buffers (grow with --batch-size / --ubatch-size)"),
    )
    fits = free >= 0
    max_ctx = max(0, (total - weights - compute) * n_gpus // max(1, on_gpu * bpl))
    rows = tuple(GpuRow(i, g.name, 0, 0, 0, g.memory_bytes, weights, compute, kv_gpu, g.memory_bytes - weights - compute - kv_gpu)
                 for i, g in enumerate(dep.cluster.gpus or (gpu,)))
    return MemoryPlan(
        engine="llama.cpp", engine_version=dep.engine_version or "unknown", version_assumed=dep.engine_version is None,
        generation="llama.cpp", model=spec.name, gpu=gpu.name, gpu_count=n_gpus, gpu_total_bytes=total, tp=1, pp=1,
        dp=1, expert_parallel=False, kv_cache_dtype=f"{type_k}/{type_v}", block_size=1, max_model_len=n_ctx,
        max_num_batched_tokens=None, max_num_seqs=None, gpu_memory_utilization=None, bytes_per_token_per_layer=bpl,
        bytes_per_token=bpl * on_gpu, page_size_bytes=bpl, weights_source="gguf", weights_exact=False, terms=terms,
        requested_bytes=None, available_kv_bytes=kv_gpu, available_exact=True, num_blocks=n_ctx, kv_tokens=n_ctx,
        max_concurrency=1.0, fits=fits, weights_fit=fits, max_model_len_fit=None if fits else int(max_ctx),
        longest_context=int(max_ctx), kv_groups=1, rows=rows, notes=tuple(dict.fromkeys(notes)),
    )


def cdiv_int(a: int, b: int) -> int:
    return -(-a // b)


# -- shared helpers -----------------------------------------------------------------------


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


def _gpu(dep: Deployment) -> Gpu:
    usable = [g for g in dep.cluster.gpus if g.memory_bytes and not g.error]
    if not usable:
        raise BadInput("no GPU is known for this plan", hint="pass --gpu, e.g. --gpu h200x8")
    return min(usable, key=lambda g: g.memory_bytes)


def _version(dep: Deployment, engine: str) -> tuple[str, bool]:
    from servepilot.planning.facts import release

    if dep.engine_version:
        try:
            return release(dep.engine_version), False
        except ValueError:
            raise BadInput(f"engine version {dep.engine_version!r} is not a version number") from None
    if engine == "vllm":
        return str(fact("vllm", "assumed_version", "0").value), True
    return "0.4.0", True


def _older(version: str, than: str) -> bool:
    from packaging.version import Version

    return Version(version) < Version(than)


def _attr(obj, name):
    return getattr(obj, name, None) if obj is not None else None


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
    forced = _attr(resolution, "non_mla_kv_forced")
    if forced and not spec.is_mla:  # compressed-tensors kv_cache_scheme forces fp8 on non-MLA layers
        return str(forced)
    resolved = _attr(resolution, "kv_cache_dtype")
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


def _rows(dep: Deployment, gpu: Gpu, tp: int, pp: int, dp: int, weights_per_stage, runtime: int, kv_per_stage) -> tuple[GpuRow, ...]:
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


def _measured(dep: Deployment, plan: MemoryPlan) -> dict | None:
    """The launch history's figures for this model, engine and GPU kind, if any match."""
    try:
        from servepilot.runs.store import latest_measurement
    except ImportError:
        return None
    gpu_key = dep.cluster.gpus[0].key if dep.cluster.gpus else None
    model = dep.launch.model or (dep.spec.path if dep.spec else None)
    if not model:
        return None
    try:
        found = latest_measurement(model, dep.engine, gpu_key)
    except Exception:  # a damaged history must not stop a plan
        return None
    if not found:
        return None
    if found.get("tp") not in (None, plan.tp):
        return None
    if found.get("kv_cache_dtype") not in (None, plan.kv_cache_dtype):
        return None
    return found


def _apply_measured(dep, spec, gpu, plan: MemoryPlan, measured: dict, dtype, block) -> MemoryPlan:
    notes = [*plan.notes, f"measured figures from run {measured.get('run_id')} used"]
    planner = {"vllm": _vllm_plan, "sglang": _sglang_plan}.get(plan.engine)
    if planner is None:
        return replace(plan, measured=measured, notes=tuple(notes))
    new = planner(dep, spec, gpu, dtype=dtype, block=block, notes=notes, tp=plan.tp,
                  available_override=measured.get("available_kv_bytes"), weights_override=measured.get("weights_bytes"))
    if measured.get("kv_tokens") and measured.get("available_kv_bytes") is None:
        new = replace(new, kv_tokens=int(measured["kv_tokens"]))
    return replace(new, measured=measured)


def _alternatives(dep, spec, gpu, plan: MemoryPlan, planner, block, tp_options) -> tuple[Alternative, ...]:
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
                    p = planner(dep, spec, gpu, dtype=dt, block=block, notes=[], tp=tp)
                except BadInput:
                    continue
            out.append(Alternative(dt, tp, p.bytes_per_token, max((r.weights_bytes for r in p.rows), default=0),
                                   p.available_kv_bytes, p.kv_tokens, p.max_concurrency, p.fits, p.weights_fit,
                                   p.max_model_len_fit, p.longest_context, is_current))
    return tuple(out)
