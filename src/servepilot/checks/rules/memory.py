"""Memory rules: weights over the GPU, no KV budget left, max_model_len beyond the KV cache.

Each rule reads the planner's MemoryPlan (ctx.plan) and ranks its remedies by what they
cost the operator: more tensor parallelism (if the GPUs are there), an fp8 KV cache (if
the engine accepts it for this model and GPU), a shorter max_model_len (the engine's own
suggestion), a higher gpu_memory_utilization, and last other hardware. Every remedy's
numbers come from re-planning with the change, not from a rule of thumb.
"""

from __future__ import annotations

import math

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import ANY_PLATFORM, rule

GiB = 1 << 30
PLAN_SOURCES = (
    "vllm/v1/worker/gpu_worker.py@v0.16.0 (determine_available_memory)",
    "vllm/v1/core/kv_cache_utils.py@v0.16.0 (get_num_blocks, _check_enough_kv_cache_memory, estimate_max_model_len)",
    "servepilot/planning/knowledge/vllm_memory.yaml",
)
MAX_UTILIZATION = 0.95  # above this the CUDA context and graphs rarely fit in what is left
TP_CANDIDATES = (2, 4, 8, 16)


def _g(n: int | None) -> str:
    return "?" if n is None else f"{n / GiB:,.2f} GiB"


def _cuda_total(plan) -> int:
    reserved = next((t.bytes for t in plan.terms if t.name == "driver_reserved"), 0)
    return plan.gpu_total_bytes - reserved


def _evidence(plan) -> tuple[Evidence, ...]:
    ev = [Evidence(f"{t.name} = {_g(t.bytes)} per GPU "
                   f"({'exact' if t.exact else f'estimate ±{_g(t.uncertainty_bytes)}'}): {t.basis}",
                   "servepilot plan") for t in plan.terms]
    ev.append(Evidence(f"KV per token per GPU = {plan.bytes_per_token:,} B ({plan.kv_cache_dtype}, block "
                       f"{plan.block_size})",
                       "vllm/v1/kv_cache_interface.py@v0.16.0"))
    return tuple(ev)


def _weights_per_gpu(plan) -> int:
    return max((r.weights_bytes for r in plan.rows), default=0)


def _weights_over(plan) -> bool:
    """Some GPU's share of the weights is at least what CUDA sees of that GPU (each row's own
    GPU: a pipeline stage on a larger GPU of a mixed box holds more)."""
    reserved = plan.gpu_total_bytes - _cuda_total(plan)
    if not plan.rows:
        return False
    return any(r.weights_bytes >= r.total_bytes - reserved for r in plan.rows)


def _tp_remedies(dep, plan, need_fit: str) -> list[Remedy]:
    """The smallest larger TP size that fits, from re-planning (needs the GPUs to be there)."""
    from servepilot.errors import ServepilotError
    from servepilot.planning import plan_deployment

    have = dep.cluster.count or 0
    sizes = tuple(t for t in TP_CANDIDATES if t > plan.tp and (not have or t * plan.pp * plan.dp <= have))
    if not sizes:
        return []
    try:
        bigger = plan_deployment(dep, kv_cache_dtype=plan.kv_cache_dtype, block_size=plan.block_size,
                                 tp_options=sizes)
    except ServepilotError:
        return []
    for alt in bigger.alternatives:
        if (alt.tp in sizes and alt.kv_cache_dtype == plan.kv_cache_dtype and alt.weights_fit
                and (alt.fits or need_fit == "weights")):
            return [Remedy(
                "flag", f"--tensor-parallel-size {alt.tp}",
                f"weights {_g(_weights_per_gpu(plan))} -> {_g(alt.weights_per_gpu)} per GPU; KV {plan.kv_tokens:,} -> "
                f"{alt.kv_tokens:,} tokens ({alt.max_concurrency:.2f}x at {plan.max_model_len:,}); uses "
                f"{alt.tp * plan.pp * plan.dp} GPUs",
                {"set": {"tensor_parallel_size": alt.tp}, "unset": []},
            )]
    return []


def _fp8_remedy(dep, ctx, plan) -> list[Remedy]:
    if plan.kv_cache_dtype.startswith("fp8"):
        return []
    alt = next((a for a in plan.alternatives if a.tp == plan.tp and a.kv_cache_dtype == "fp8"), None)
    if alt is None or not (alt.fits and alt.weights_fit):
        return []
    try:  # only when the engine has an attention backend for an fp8 KV cache here
        res = ctx.resolver.resolve_with(dep, kv_cache_dtype="fp8")
        if res.fails or not res.kv_valid:
            return []
    except Exception:  # no resolver for this engine: offer it, the trade-off says what it costs
        pass
    return [Remedy(
        "flag", "--kv-cache-dtype fp8",
        f"KV cache {plan.bytes_per_token:,} -> {alt.bytes_per_token:,} B/token per GPU; {plan.kv_tokens:,} -> "
        f"{alt.kv_tokens:,} tokens; "
        "accuracy may drop without calibrated KV scales",
        {"set": {"kv_cache_dtype": "fp8"}, "unset": []},
    )]


def _len_remedy(plan) -> list[Remedy]:
    if not plan.max_model_len_fit or plan.max_model_len_fit >= plan.max_model_len:
        return []
    n = plan.max_model_len_fit
    return [Remedy("flag", f"--max-model-len {n}",
                   f"requests longer than {n:,} tokens are refused (was {plan.max_model_len:,})",
                   {"set": {"max_model_len": n}, "unset": []})]


def _util_remedy(plan, extra_bytes: int) -> list[Remedy]:
    """The gpu_memory_utilization that adds `extra_bytes` to the budget, if it stays sane."""
    if plan.gpu_memory_utilization is None or plan.engine != "vllm":
        return []
    total = _cuda_total(plan)
    needed = plan.gpu_memory_utilization + extra_bytes / total
    util = math.ceil(needed * 100) / 100
    if util > MAX_UTILIZATION or util <= plan.gpu_memory_utilization:
        return []
    return [Remedy("flag", f"--gpu-memory-utilization {util:g}",
                   f"+{_g(int((util - plan.gpu_memory_utilization) * total))} per GPU for vLLM; less headroom for CUDA "
                   "graphs and other processes",
                   {"set": {"gpu_memory_utilization": util}, "unset": []})]


def _hardware(plan) -> Remedy:
    return Remedy("hardware", "more GPUs, or GPUs with more memory",
                  f"each GPU now has {_g(plan.gpu_total_bytes)}; the plan needs more per GPU or more GPUs to split "
                  "over")


@rule(
    "SP-MEM-001", "oom_weights", "Weights do not fit in GPU memory",
    facts=("vLLM loads each rank's share of the weights before profiling; a share larger than the GPU's free memory "
           "ends in torch.OutOfMemoryError while loading.",
           "Shares: TP splits attention and MLP projections, replicates norms and routers, vocab-parallel embeddings; "
           "EP spreads whole experts over TP x DP ranks; PP splits layers.",
           "--quantization fp8 on a 16-bit checkpoint is quantized while loading: up to 0.12 "
           "the load holds the 16-bit weights, 0.13 - 0.15 also their FP8 copies, 0.16 - 0.19 "
           "the FP8 weights plus one layer in 16 bits; 0.20 - 0.32 not read; 0.33 refuses it.",
           "Each pipeline stage loads on its own GPUs: its load peak is judged against them."),
    sources=PLAN_SOURCES + (
        "vllm/model_executor/layers/quantization/fp8.py@v0.8.5, @v0.10.2 and @v0.12.0 "
        "(create_weights in params_dtype, process_weights_after_loading)",
        "vllm/model_executor/layers/quantization/fp8.py@v0.13.0, @v0.14.1 and @v0.15.1 "
        "(patched_weight_loader); models/llama.py@v0.13.0 (load_weights params_dict)",
        "vllm/model_executor/layers/quantization/fp8.py@v0.16.0 and @v0.19.0 "
        "(Fp8OnlineLinearMethod: device='meta', materialized per layer)",
        "vllm/model_executor/layers/quantization/fp8.py@v0.33.0 and @v0.34.0 (Fp8Config.__init__)",
        "servepilot/planning/knowledge/vllm_memory.yaml (online_fp8_load)",
    ), platforms=ANY_PLATFORM,
)
def weights_over_gpu(dep, ctx) -> list[Finding]:
    plan = ctx.plan
    if plan is None:
        return []
    w = _weights_per_gpu(plan)
    if not _weights_over(plan):
        if _load_fails(plan):
            return [_load_peak_finding(dep, plan, w)]
        return []
    remedies = _tp_remedies(dep, plan, "weights") + [_hardware(plan)]
    return [Finding(
        "SP-MEM-001", "oom_weights", "error",
        f"{_g(w)} of weights per GPU do not fit in {_g(plan.gpu_total_bytes)}",
        f"With TP {plan.tp} x PP {plan.pp} each GPU must hold {_g(w)} of weights ({plan.weights_source}); "
        f"CUDA sees {_g(_cuda_total(plan))}. Loading will run out of memory.",
        _evidence(plan), tuple(remedies),
    )]


def _load_fails(plan) -> bool:
    """Loading needs more than some stage's GPU has, though the loaded weights would fit
    (online FP8); the planner judges each stage against its own GPUs."""
    return plan.load_fits is False


def _load_peak_finding(dep, plan, w: int) -> Finding:
    peak = plan.load_over_stage_peak_bytes or plan.load_peak_bytes
    cuda = plan.load_over_stage_cuda_bytes or _cuda_total(plan)
    remedies = _tp_remedies(dep, plan, "weights")
    if plan.engine == "vllm" and plan.load_peak_mode in ("full_16bit", "full_16bit_and_fp8"):
        remedies.append(Remedy(
            "upgrade", "pip install 'vllm>=0.16.0,<0.20.0'",
            "vLLM 0.16 to 0.19 materialize the 16-bit weights one layer at a time (read at "
            "0.16.0 and 0.19.0; 0.20 - 0.32 not read, 0.33 and later refuse --quantization "
            "fp8 on a 16-bit checkpoint); a new engine release to install and validate",
            {"upgrade": {"package": "vllm", "specifier": ">=0.16.0,<0.20.0"}}))
    remedies.append(_hardware(plan))
    return Finding(
        "SP-MEM-001", "oom_weights", "error",
        f"loading needs {_g(peak)} per GPU, more than the GPU's {_g(cuda)}",
        f"--quantization fp8 quantizes the 16-bit checkpoint while loading: "
        f"{plan.load_peak_basis}. The FP8 weights ({_g(w)} per GPU) would fit, but with "
        f"TP {plan.tp} x PP {plan.pp} loading runs out of memory first.",
        _evidence(plan) + (Evidence(
            f"load peak = {_g(peak)} per GPU: {plan.load_peak_basis}",
            "servepilot/planning/knowledge/vllm_memory.yaml (online_fp8_load)"),),
        tuple(remedies),
    )


@rule(
    "SP-MEM-003", "oom_kv_cache", "No memory left for the KV cache",
    facts=("vLLM: available KV memory = total x gpu_memory_utilization - weights - activation peak - non-torch memory; "
           "when it is not positive the engine raises 'No available memory for the cache blocks'.",),
    sources=PLAN_SOURCES, platforms=ANY_PLATFORM,
)
def no_kv_budget(dep, ctx) -> list[Finding]:
    plan = ctx.plan
    if plan is None or _weights_over(plan) or _load_fails(plan):
        return []
    if plan.engine == "llama.cpp":
        return _llamacpp_kv(plan)
    if plan.available_kv_bytes > 0:
        return []
    # enough for one max_model_len request on top of making the budget positive
    short = -plan.available_kv_bytes + plan.max_model_len * plan.bytes_per_token
    remedies = _tp_remedies(dep, plan, "weights") + _util_remedy(plan, short) + [_hardware(plan)]
    detail = (f"{plan.engine} will stop after profiling: weights ({_g(_weights_per_gpu(plan))}) "
              f"and runtime leave nothing of {_g(plan.requested_bytes)} (gpu_memory_utilization "
              f"{plan.gpu_memory_utilization}) for the KV cache.")
    budget = _g(plan.available_kv_bytes)
    severity, title = "error", f"no KV cache memory: the budget is {budget} per GPU"
    flashinfer = _with_flashinfer_sampler(dep, plan)
    if flashinfer is not None:
        # the install decides: a plain `pip install vllm` (0.8 - 0.11) sorts in the sampler
        # warm-up, FlashInfer's sampler does not
        with_fi = flashinfer.available_kv_bytes
        fits = with_fi > 0 and flashinfer.fits and flashinfer.weights_fit
        outcome = ("the launch fits" if fits
                   else f"a {plan.max_model_len:,}-token request still does not fit" if with_fi > 0
                   else "there is still none")
        detail += (" That assumes the sampler warm-up's native sort (flashinfer is not a "
                   f"dependency of this vLLM wheel): {plan.max_num_seqs:,} dummy requests over the "
                   "whole vocabulary. With FlashInfer installed (pip install "
                   "'vllm[flashinfer]', or the vllm/vllm-openai image) the budget is "
                   f"{_g(with_fi)} and {outcome}.")
        if fits:
            severity = "warning"
            title = (f"no KV cache memory without FlashInfer's sampler: {budget} per GPU "
                     f"(with it: {_g(with_fi)})")
        version = plan.engine_version
        remedies = _seqs_remedies(dep, plan) + [Remedy(
            "upgrade", f"pip install 'vllm[flashinfer]=={version}'",
            f"FlashInfer's top-k/top-p sampler: KV budget {budget} -> {_g(with_fi)} per GPU",
            {"upgrade": {"package": "vllm[flashinfer]", "specifier": f"=={version}"}})] + remedies
    return [Finding("SP-MEM-003", "oom_kv_cache", severity, title, detail, _evidence(plan),
                    tuple(remedies))]


def _replanned(dep, plan, *, env: dict | None = None, options: dict | None = None):
    """The plan of `dep` with launch environment variables or options changed (None on error)."""
    import dataclasses

    from servepilot.errors import ServepilotError
    from servepilot.planning import plan_deployment

    launch = dep.launch
    if env:
        shell = dataclasses.replace(launch.shell, env={**launch.shell.env, **env})
        launch = dataclasses.replace(launch, shell=shell)
    if options:
        launch = dataclasses.replace(launch, options={**launch.options, **options})
    try:
        return plan_deployment(dataclasses.replace(dep, launch=launch),
                               kv_cache_dtype=plan.kv_cache_dtype, block_size=plan.block_size)
    except ServepilotError:
        return None


def _with_flashinfer_sampler(dep, plan):
    """The plan with FlashInfer's sampler, where the install decides it and the plan sorted."""
    if plan.engine != "vllm" or plan.available_kv_bytes_with_flashinfer_sampler is None:
        return None
    return _replanned(dep, plan, env={"VLLM_USE_FLASHINFER_SAMPLER": "1"})


def _seqs_remedies(dep, plan) -> list[Remedy]:
    """Fewer dummy requests in the sampler warm-up: the largest --max-num-seqs that fits."""
    for seqs in (512, 256, 128, 64):
        if plan.max_num_seqs is None or seqs >= plan.max_num_seqs:
            continue
        fewer = _replanned(dep, plan, options={"max_num_seqs": seqs})
        if fewer is not None and fewer.available_kv_bytes > 0 and fewer.fits:
            return [Remedy("flag", f"--max-num-seqs {seqs}",
                           f"the sampler warm-up over {seqs} requests instead of "
                           f"{plan.max_num_seqs:,}: KV budget {_g(plan.available_kv_bytes)} -> "
                           f"{_g(fewer.available_kv_bytes)} per GPU; at most {seqs} requests run "
                           "at once",
                           {"set": {"max_num_seqs": seqs}, "unset": []})]
    return []


def _llamacpp_kv(plan) -> list[Finding]:
    """llama.cpp allocates n_ctx tokens of KV up front: too many and the allocation fails."""
    if plan.fits:
        return []
    remedies = []
    if plan.max_model_len_fit:
        remedies.append(Remedy("flag", f"--ctx-size {plan.max_model_len_fit}",
                               f"context {plan.max_model_len:,} -> {plan.max_model_len_fit:,} tokens (shared by all "
                               "slots)",
                               {"set": {"ctx_size": plan.max_model_len_fit}, "unset": []}))
    if not plan.kv_cache_dtype.startswith("q8_0"):
        remedies.append(Remedy("flag", "--cache-type-k q8_0 --cache-type-v q8_0",
                               "KV cache about half the size of f16; V quantization needs flash attention (-fa)",
                               {"set": {"cache_type_k": "q8_0", "cache_type_v": "q8_0"}, "unset": []}))
    remedies.append(_hardware(plan))
    kv = next((t.bytes for t in plan.terms if t.name == "kv_cache"), 0)
    return [Finding(
        "SP-MEM-003", "oom_kv_cache", "error",
        f"a {plan.max_model_len:,}-token KV cache ({_g(kv)}) does not fit beside the weights",
        f"llama.cpp allocates the whole context's KV cache ({plan.kv_cache_dtype}) at start; with "
        f"{_g(_weights_per_gpu(plan))} "
        f"of offloaded weights on a {_g(plan.gpu_total_bytes)} GPU it will fail to allocate it.",
        _evidence(plan), tuple(remedies),
    )]


@rule(
    "SP-MEM-002", "max_model_len", "One max_model_len request does not fit in the KV cache",
    facts=("vLLM v1: 'To serve at least one request with the models's max seq len (N), (X GiB KV cache is needed, "
           "which is "
           "larger than the available KV cache memory (Y GiB). Based on the available memory, the estimated maximum "
           "model "
           "length is M.' (binary search over max_model_len)",
           "vLLM V0: 'The model's max seq len (N) is larger than the maximum number of tokens that can be stored in KV "
           "cache (M).'"),
    sources=PLAN_SOURCES, platforms=ANY_PLATFORM,
)
def kv_below_one_request(dep, ctx) -> list[Finding]:
    plan = ctx.plan
    if plan is None or plan.engine == "llama.cpp" or plan.fits or plan.available_kv_bytes <= 0 \
            or _weights_over(plan) or _load_fails(plan):
        return []
    need = plan.max_model_len * plan.bytes_per_token
    remedies = (_tp_remedies(dep, plan, "kv") + _fp8_remedy(dep, ctx, plan) + _len_remedy(plan)
                + _util_remedy(plan, need - plan.available_kv_bytes) + [_hardware(plan)])
    suggestion = f"; the engine will suggest max_model_len {plan.max_model_len_fit:,}" if plan.max_model_len_fit else ""
    return [Finding(
        "SP-MEM-002", "max_model_len", "error",
        f"max_model_len {plan.max_model_len:,} needs more KV cache than the {_g(plan.available_kv_bytes)} per GPU left",
        f"One {plan.max_model_len:,}-token request needs about {_g(need)} of KV cache per GPU "
        f"({plan.bytes_per_token:,} B/token, {plan.kv_cache_dtype}); {plan.kv_tokens:,} tokens fit{suggestion}.",
        _evidence(plan), tuple(remedies),
    )]
