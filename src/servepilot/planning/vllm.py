"""vLLM: the KV budget as gpu_worker.determine_available_memory computes it, per version."""

from __future__ import annotations

import math
from dataclasses import dataclass

from servepilot.checkpoint.spec import ModelSpec
from servepilot.errors import BadInput
from servepilot.hardware.cluster import Gpu
from servepilot.planning import kv as kvmod
from servepilot.planning.budget import GiB, Term, activation_peak
from servepilot.planning.common import (
    derived_max_model_len,
    engine_version,
    gpu_rows,
    older,
    refuse_absurd_ranks,
)
from servepilot.planning.facts import fact
from servepilot.planning.options import as_bool, as_float, as_int, option, parse_bytes
from servepilot.planning.result import MemoryPlan
from servepilot.planning.weights import split_weights

# The weights split of one spec for one layout, kept for the next plan of the same deployment:
# a check plans it several times (its KV dtype alternatives, the remedies' re-plans), and the
# split (every tensor of the checkpoint classified) is most of a plan's work. WeightsSplit is
# frozen; the spec is held weakly, so a new spec object is never mistaken for an old one.
_SPLITS: dict = {}


def _split_once(spec: ModelSpec, **layout):
    import weakref

    key = (id(spec), tuple(sorted(layout.items())))
    held = _SPLITS.get(key)
    if held is not None and held[0]() is spec:
        return held[1]
    split = split_weights(spec, **layout)
    if len(_SPLITS) > 64:
        _SPLITS.clear()
    try:
        _SPLITS[key] = (weakref.ref(spec), split)
    except TypeError:  # a spec that cannot be weakly referenced: not kept
        pass
    return split


def plan_vllm(dep, spec: ModelSpec, gpu: Gpu, *, dtype: str, block, notes: list[str], tp,
              available_override: int | None = None, weights_override: int | None = None,
              backend: str | None = None) -> MemoryPlan:
    """The vLLM plan of `dep` on one GPU kind; `tp` overrides the command's (for alternatives),
    the overrides put measured figures in place of the estimates."""
    launch = dep.launch
    version, assumed = engine_version(dep, "vllm")
    notes = list(notes)
    sources: list[str] = []

    def f(name):
        row = fact("vllm", name, version)
        sources.append(row.source)
        return row

    generation = f("generation").value
    if generation == "v1" and str(launch.shell.env.get("VLLM_USE_V1", "")) == "0" and older(version, "0.11.0"):
        generation = "v0"
        notes.append("VLLM_USE_V1=0: the V0 engine sizes the KV cache")
    elif generation == "v0" and str(launch.shell.env.get("VLLM_USE_V1", "")) == "1" and f("v1_opt_in").value:
        generation = "v1"
        notes.append("VLLM_USE_V1=1: the V1 engine sizes the KV cache")
    tp = tp or launch.tensor_parallel_size
    pp, dp = launch.pipeline_parallel_size, launch.data_parallel_size
    refuse_absurd_ranks(tp, pp, dp)
    ep = launch.expert_parallel
    util = as_float(option(launch,
                           "gpu_memory_utilization"), "--gpu-memory-utilization") or f("gpu_memory_utilization").value
    block = int(block or as_int(option(launch, "block_size"), "--block-size") or f("block_size").value)
    derived_len = derived_max_model_len(spec)
    if generation == "v0":
        derived_len = _v0_interleaved_cap(launch, spec, derived_len, f, notes)
    max_model_len = as_int(option(launch, "max_model_len"), "--max-model-len")
    auto_fit = max_model_len == -1
    if max_model_len is None or auto_fit:
        max_model_len = derived_len
    _other_processes_note(f, generation, version, notes)
    reserved = f("driver_reserved_bytes")
    cuda_total = gpu.memory_bytes - int(reserved.value)
    mnbt, mns = _vllm_batch(launch, spec, gpu, cuda_total, generation, max_model_len, f)

    mdtype = kvmod.model_dtype_name(spec, option(launch, "dtype"))
    online = _online_quantization(launch, spec, version, f, notes)
    partition = _pp_partition(launch, spec, pp, f, notes)
    split = _split_once(spec, tp=tp, pp=pp, dp=dp, expert_parallel=ep, vocab_padding=int(f("vocab_padding").value),
                        run_dtype=mdtype,
                        expert_padding=_mxfp4_padding(spec, gpu, f, notes, launch.shell.env),
                        online=online[0] if online else None, pp_partition=partition)
    notes.extend(split.notes)
    per_stage = list(split.per_stage)
    load_peaks = _load_peaks(split, online[1] if online else None)
    if weights_override is not None:
        per_stage = [weights_override] * len(per_stage)
        if online:  # a run measures the FP8 weights; loading still needs the estimated peak
            load_peaks = [max(w, lp) for w, lp in zip(per_stage, load_peaks, strict=True)]

    container = (dep.extra or {}).get("container") if isinstance(dep.extra, dict) else None
    rt = _runtime(launch, spec, f, generation=generation, tp=tp, pp=pp, ep=ep, mnbt=mnbt, mns=mns, mdtype=mdtype,
                  backend=backend, image=(container or {}).get("image"), notes=notes)
    if not 0 < util <= 1:  # CacheConfig: Field(gt=0, le=1); check reports it as SP-ARGS-002
        raise BadInput(f"--gpu-memory-utilization {util:g} is outside (0, 1]: vLLM refuses it before loading")
    requested = math.ceil(cuda_total * util)
    # each stage's budget comes from its own GPUs (the smallest among its ranks): mixed GPUs
    stage_totals = _stage_cuda_totals(dep, gpu, tp, pp, dp, int(reserved.value), notes)
    requested_per_stage = [math.ceil(t * util) for t in stage_totals]
    w_max = max(per_stage)
    w_exact = split.exact or weights_override is not None
    terms = [
        Term("driver_reserved", int(reserved.value), False, int(reserved.get("uncertainty")),
             f"nvidia-smi total − cudaMemGetInfo total; {reserved.source}", subtracted=False),
        Term("weights", w_max, w_exact, 0 if w_exact else int(w_max * 0.03),
             ("measured by a run" if weights_override is not None else f"{split.source}: split for TP {tp}, PP {pp}"
              + (", EP" if ep else "")
              + (f", quantized to {online[0]} while loading" if online else ""))),
        *rt.terms,
    ]
    peak, non_torch, graphs, graphs_subtracted = rt.peak, rt.non_torch, rt.graphs, rt.graphs_subtracted
    kv_bytes_opt = parse_bytes(option(launch, "kv_cache_memory_bytes"), "--kv-cache-memory-bytes")
    subtract = peak + non_torch + (graphs if graphs_subtracted else 0)
    available_per_stage = [req - w - subtract
                           for req, w in zip(requested_per_stage, per_stage, strict=True)]
    available_exact = False
    flashinfer_available = None
    if rt.peak_with_flashinfer_sampler is not None:
        other = rt.peak_with_flashinfer_sampler + non_torch + (graphs if graphs_subtracted else 0)
        flashinfer_available = min(req - w - other
                                   for req, w in zip(requested_per_stage, per_stage, strict=True))
    if kv_bytes_opt:
        available_per_stage = [kv_bytes_opt] * len(per_stage)
        available_exact = True
        notes.append("--kv-cache-memory-bytes: the KV budget is given; profiling does not size it")
    if available_override is not None:
        available_per_stage = [available_override] * len(per_stage)
        available_exact = True
    kv_budget_term = Term(
        "kv_budget",
        min(available_per_stage),
        available_exact,
        0
        if available_exact
        else sum(t.uncertainty_bytes for t in terms if t.subtracted) + int(reserved.get("uncertainty") * util),
        (
            "--kv-cache-memory-bytes"
            if kv_bytes_opt
            else "measured"
            if available_override is not None
            else f"ceil(total × {util:g}) − weights − activation peak − non-torch"
            + (" − CUDA graphs" if graphs_subtracted else "")
        ),
    )
    terms.append(kv_budget_term)
    mla_layout = _mla_layout(launch, spec, version, f, notes)
    bpl = kvmod.kv_bytes_per_token_per_layer(spec, tp, dtype, mdtype, mla_layout=mla_layout)
    types = kvmod.layer_types(spec)
    if "mamba" in types:
        block = _hybrid_state(spec, tp, mdtype, bpl, block, version, f, notes)
    hybrid_fact = f("hybrid_kv_cache_manager")
    hybrid = bool(hybrid_fact.value) and not as_bool(option(launch, "disable_hybrid_kv_cache_manager"))
    if hybrid and hybrid_fact.get("disabled_by_kv_transfer") and option(launch, "kv_transfer_config"):
        hybrid = False
        if len(set(kvmod.layer_types(spec))) > 1:
            notes.append("--kv-transfer-config turns the hybrid KV cache manager off: sliding layers are sized as full")
    within_25pct = f("hybrid_group_size").value != "min"
    capacity_args = dict(
        types=types, window=kvmod.sliding_window(spec), bytes_per_token_per_layer=bpl,
        available_per_stage=available_per_stage, block_size=block, max_model_len=max_model_len,
        generation=generation, hybrid=hybrid, max_num_batched_tokens=mnbt, search_limit=derived_len,
        num_gpu_blocks_override=as_int(option(launch, "num_gpu_blocks_override"), "--num-gpu-blocks-override"),
        group_within_25pct=within_25pct,
        tokens_from_concurrency=f("kv_tokens_report").value == "concurrency",
        whole_model_check=pp > 1 and _whole_model_check(f, notes),
        stages=kvmod.pp_layer_ranges(len(types), pp, partition),
    )
    cap = kvmod.capacity(**capacity_args)
    if auto_fit and cap.longest_context:
        # --max-model-len -1 (0.16+): the engine takes the longest length that fits, then sizes as usual
        notes.append(f"--max-model-len -1: the engine fits the longest context ({cap.longest_context:,})")
        max_model_len = min(max_model_len, cap.longest_context)
        cap = kvmod.capacity(**{**capacity_args, "max_model_len": max_model_len})
    if any(k in (spec.config or {}) for k in ("vision_config", "audio_config")) and not kv_bytes_opt:
        notes.append("multimodal model: vLLM also profiles the encoder with dummy images/audio; that peak is not in "
                     "the estimate")
    if "sliding" in types and generation == "v1" and hybrid:
        notes.append("sliding-window layers: 'GPU KV cache size' counts every layer; a long request holds only the "
                     "window in sliding layers")
    if kv_bytes_opt:
        # the given KV cache, weights and the profile peak must fit on the GPU itself
        weights_fit = all(w + subtract + kv_bytes_opt <= t
                          for w, t in zip(per_stage, stage_totals, strict=True))
    else:
        weights_fit = (all(w + subtract < r
                           for w, r in zip(per_stage, requested_per_stage, strict=True))
                       and min(available_per_stage) > 0)
    load_peak = max(load_peaks) if load_peaks else None
    # each stage loads on its own GPUs: judged against that stage's CUDA total, not the smallest
    over = next((s for s, (lp, t) in enumerate(zip(load_peaks, stage_totals, strict=False))
                 if lp >= t), None)
    if over is not None:
        weights_fit = False  # loading stops before any KV cache is sized
    rows = gpu_rows(dep, gpu, tp, pp, dp, per_stage, peak + non_torch + graphs + int(reserved.value),
                 [cap.num_blocks * cap.page_size_bytes
                  * _layers_on(types, pp, s, generation, hybrid, within_25pct, partition)
                  for s in range(pp)])
    if assumed:
        notes.append(f"engine version unknown: vLLM {version} rules assumed (pass --engine-version)")
    kv_per_token = kvmod.kv_bytes_per_token(spec, tp, dtype, model_dtype=mdtype, mla_layout=mla_layout)
    return MemoryPlan(
        engine="vllm", engine_version=version, version_assumed=assumed, generation=generation,
        model=spec.name, gpu=gpu.name, gpu_count=max(1, dep.cluster.count), gpu_total_bytes=gpu.memory_bytes,
        tp=tp, pp=pp, dp=dp, expert_parallel=ep, kv_cache_dtype=dtype, block_size=block,
        max_model_len=max_model_len, max_num_batched_tokens=mnbt, max_num_seqs=mns, gpu_memory_utilization=util,
        bytes_per_token_per_layer=bpl, bytes_per_token=kv_per_token, page_size_bytes=cap.page_size_bytes,
        weights_source="measured" if weights_override is not None else split.source, weights_exact=w_exact,
        terms=tuple(terms), requested_bytes=requested, available_kv_bytes=min(available_per_stage),
        available_exact=available_exact, num_blocks=cap.num_blocks, kv_tokens=cap.kv_tokens,
        max_concurrency=cap.max_concurrency, fits=cap.fits, weights_fit=weights_fit,
        max_model_len_fit=cap.max_model_len_fit, longest_context=cap.longest_context, kv_groups=cap.groups,
        rows=rows, notes=tuple(dict.fromkeys(notes)), sources=tuple(dict.fromkeys(sources)),
        load_peak_bytes=load_peak,
        load_peak_basis=_load_peak_basis(online[1]) if load_peak is not None else "",
        load_peak_mode=online[1] if load_peak is not None else "",
        load_fits=None if load_peak is None else over is None,
        load_over_stage=over,
        load_over_stage_peak_bytes=load_peaks[over] if over is not None else None,
        load_over_stage_cuda_bytes=stage_totals[over] if over is not None else None,
        available_kv_bytes_with_flashinfer_sampler=(
            flashinfer_available if not (kv_bytes_opt or available_override is not None) else None),
    )


def _stage_cuda_totals(dep, gpu: Gpu, tp: int, pp: int, dp: int, reserved: int,
                       notes: list[str]) -> list[int]:
    """CUDA's total memory on the smallest GPU of each pipeline stage, ranks in vLLM's order
    (dp, pp, tp) on the GPUs in order. Every worker sizes its budget from its own GPU; the
    engine then gives every worker the smallest block count (get_kv_cache_configs@v0.14.1)."""
    # ranks index the GPUs as listed: a GPU that errored keeps its place (the worker still
    # runs on it), it only adds no size to the minimum
    gpus = list(dep.cluster.gpus)
    readable = [g for g in gpus[: tp * pp * dp] if g.memory_bytes and not g.error]
    totals = []
    for s in range(max(1, pp)):
        ranks = [d * pp * tp + s * tp + t for d in range(max(1, dp)) for t in range(max(1, tp))]
        own = [gpus[i].memory_bytes for i in ranks
               if i < len(gpus) and gpus[i].memory_bytes and not gpus[i].error]
        totals.append((min(own) if own else gpu.memory_bytes) - reserved)
    if len({g.memory_bytes for g in readable}) > 1:
        notes.append("GPUs of different sizes: each worker's KV budget comes from its own GPU "
                     "(pipeline stage budgets: "
                     + ", ".join(f"{(t + reserved) / GiB:.1f} GiB GPU" for t in totals)
                     + "); every worker gets the smallest block count")
    return totals


def _other_processes_note(f, generation: str, version: str, notes: list[str]) -> None:
    """Say so where this release subtracts other processes' GPU memory from the budget (the
    plan cannot see them; it assumes the GPU to itself)."""
    how = f("other_processes_memory").get(generation)
    if how == "not_read":
        notes.append(f"whether vLLM {version} ({generation.upper()}) counts what other processes "
                     "hold on the GPU against the budget was not read: unchecked")
    if how == "counted":
        notes.append(f"vLLM {version} ({generation.upper()}) subtracts what other processes hold "
                     "on the GPU from total x gpu_memory_utilization (non-torch = total - free - "
                     "torch): on a shared GPU the KV budget is that much smaller than planned")


def _whole_model_check(f, notes: list[str]) -> bool:
    """Whether this release checks one request of the whole model against the smallest
    worker's budget (pp_max_model_len_check)."""
    rule = f("pp_max_model_len_check").value
    if rule == "not_read":
        notes.append("pipeline parallel: whether this release checks max_model_len per worker or "
                     "for the whole model was not read (0.16 whole model, 0.18 per worker); "
                     "checked per worker")
    return rule == "whole_model"


def _pp_partition(launch, spec: ModelSpec, pp: int, f, notes: list[str]) -> tuple[int, ...] | None:
    """The layers per stage VLLM_PP_LAYER_PARTITION names, where the release reads it."""
    value = launch.shell.env.get("VLLM_PP_LAYER_PARTITION")
    if value is None or pp <= 1 or spec.attention is None:
        return None
    reads = f("pp_layer_partition_env").value
    if reads == "not_read":
        notes.append("whether this release reads VLLM_PP_LAYER_PARTITION was not read: planned "
                     "with layers split evenly, unchecked")
        return None
    if not reads:
        notes.append("VLLM_PP_LAYER_PARTITION is not read by this release: layers split evenly")
        return None
    parts = kvmod.pp_partition(value, spec.attention.num_layers, pp)
    notes.append(f"VLLM_PP_LAYER_PARTITION={value}: layers per pipeline stage {list(parts)}")
    return parts


# --quantization values vLLM applies to a 16-bit checkpoint while loading it; "fp8"
# (online_fp8_load) and "experts_int8" (online_experts_int8) are modelled, the others are
# named in the plan's notes as not modelled.
_ONLINE_NOT_MODELLED = ("bitsandbytes", "torchao", "fp8_per_tensor", "fp8_per_block",
                        "ptpc_fp8", "mxfp8", "mxfp4", "int8", "int8_per_channel")


def _online_quantization(launch, spec: ModelSpec, version: str, f,
                         notes: list[str]) -> tuple[str, str] | None:
    """(method, how loading holds the weights) when vLLM quantizes this 16-bit checkpoint
    while loading it (no quantization declared): ("fp8", "full_16bit" | "full_16bit_and_fp8"
    | "layerwise") or ("experts_int8", "in_place"); else None."""
    method = str(option(launch, "quantization") or "").strip().lower()
    if not method or spec.quant is not None or spec.format == "gguf":
        return None
    if method == "experts_int8" and f("online_experts_int8").value is True:
        notes.append("--quantization experts_int8: the MoE experts are quantized to int8 as "
                     "they load (linear layers stay 16-bit)")
        return ("experts_int8", "in_place")
    if method != "fp8":
        if method in _ONLINE_NOT_MODELLED or method == "experts_int8":
            notes.append(f"--quantization {method} on a 16-bit checkpoint quantizes it while "
                         "loading; how much memory that takes is not modelled: the plan counts "
                         "the checkpoint's own weights")
        return None
    mode = str(f("online_fp8_load").value)
    if mode == "not_read":
        notes.append(f"how vLLM {version} loads --quantization fp8 on a 16-bit checkpoint was "
                     "not read: planned as the 16-bit checkpoint, the load peak unchecked")
        return None
    if mode == "refused":
        notes.append(f"vLLM {version} refuses --quantization fp8 on a 16-bit checkpoint (no "
                     "online FP8 in Fp8Config; --quantization fp8_per_tensor): planned as the "
                     "16-bit checkpoint")
        return None
    notes.append("--quantization fp8 on a 16-bit checkpoint: linear layers and experts are "
                 "quantized to FP8 while loading; embeddings, lm_head, norms and routers stay "
                 "16-bit")
    return ("fp8", mode)


def _load_peaks(split, online: str | None) -> list[int]:
    """Per stage, the weight memory loading needs at its peak (online FP8 only; else [])."""
    if online == "full_16bit":
        return list(split.unquantized_per_stage)
    if online == "full_16bit_and_fp8":
        return [a + b for a, b in zip(split.unquantized_per_stage, split.quantized_per_stage,
                                      strict=True)]
    if online == "layerwise":
        layers = split.largest_layer_unquantized
        return [w + layer for w, layer in zip(split.per_stage, layers, strict=True)]
    return []


def _load_peak_basis(online: str | None) -> str:
    if online == "full_16bit":
        return ("every quantized layer is allocated in 16 bits when the model is built and "
                "quantized once loaded: the load peaks at the 16-bit weights")
    if online == "full_16bit_and_fp8":
        return ("every quantized layer is allocated in 16 bits when the model is built and "
                "quantized as it completes, but the model's load_weights keeps the 16-bit "
                "tensors until it returns: the load peaks at the 16-bit weights + the FP8 copies")
    return ("layers are materialized in 16 bits one at a time: FP8 weights + the largest layer "
            "in 16 bits")


@dataclass(frozen=True)
class _Runtime:
    terms: tuple[Term, ...]
    peak: int
    non_torch: int
    graphs: int
    graphs_subtracted: bool
    peak_with_flashinfer_sampler: int | None = None  # set when the install decides the sampler


def _sampler_bytes(launch, row, image: str | None, notes: list[str]) -> tuple[float, float | None]:
    """Bytes per logit of the sampler warm-up, and FlashInfer's figure when the install decides
    and the deployment does not say. Where FlashInfer is optional (the row's
    without_flashinfer), a plain `pip install vllm` sorts natively; the vllm/vllm-openai image
    ships FlashInfer; VLLM_USE_FLASHINFER_SAMPLER=0 sorts natively everywhere."""
    native = row.get("without_flashinfer")
    if native is None:
        return float(row.value), None
    env = str(launch.shell.env.get("VLLM_USE_FLASHINFER_SAMPLER", "")).strip()
    if env == "0":
        return float(native), None
    if env or (image and "vllm-openai" in image):
        return float(row.value), None
    notes.append(f"sampler warm-up sorts natively ({native:g} B per logit): flashinfer is not a "
                 "dependency of this vLLM wheel; with it installed (pip install "
                 f"'vllm[flashinfer]', or the vllm/vllm-openai image) {row.value:g} B")
    return float(native), float(row.value)


def _runtime(launch, spec: ModelSpec, f, *, generation: str, tp: int, pp: int, ep: bool, mnbt: int, mns: int,
             mdtype: str, backend: str | None = None, image: str | None = None,
             notes: list[str] | None = None) -> _Runtime:
    """The profile run's activation peak (with the attention backend's workspace), non-torch
    memory and CUDA graphs."""
    sampler = f("sampler_bytes_per_logit")
    per_logit, flashinfer_per_logit = _sampler_bytes(launch, sampler, image,
                                                     notes if notes is not None else [])
    peak_args = dict(
        tp=tp, expert_parallel=ep, batched_tokens=mnbt, num_seqs=mns,
        moe_chunk_tokens=int(f("fused_moe_chunk_tokens").value),
        moe_cache13_shared=bool(f("fused_moe_shared_cache13").value) if spec.moe else True,
        act_bytes=4 if mdtype in ("float32", "float") else 2,
    )
    peak, basis = activation_peak(spec, sampler_bytes_per_logit=per_logit, **peak_args)
    peak_flashinfer = None
    if flashinfer_per_logit is not None:
        peak_flashinfer = activation_peak(spec, sampler_bytes_per_logit=flashinfer_per_logit,
                                          **peak_args)[0]
    workspace, ws_basis = 0, ""
    if backend and generation == "v1":
        ws = f("attention_workspace_bytes")
        key = next((k for k in ("FLASHINFER_MLA", "FLASHINFER") if str(backend).upper().startswith(k)), None)
        if key:
            workspace = int(ws.get(key))
            ws_basis = f" + {backend} workspace {workspace / GiB:.2f} GiB ({ws.source})"
    peak += workspace
    if peak_flashinfer is not None:
        peak_flashinfer += workspace
    nt = f("non_torch_bytes")
    vals = nt.get(generation) or nt.data  # a row may say how the other engine generation measures
    after_init = generation == "v1" and f("snapshot_after_distributed_init").value
    non_torch = int(vals["base"]) + (int(vals["per_tp_group"]) if tp * pp > 1 and not after_init else 0)
    subtracted = bool(generation == "v1" and f("cudagraph_subtracted").value)
    eager = as_bool(option(launch, "enforce_eager"))
    cg = f("cudagraph_bytes")
    graphs = 0 if eager else int(cg.value)
    how = ("--enforce-eager: no graphs" if eager else
           "subtracted from the KV budget (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)" if subtracted else
           "captured after the KV cache is allocated, out of the headroom")
    terms = (
        Term("activation_peak", peak, False, int((peak - workspace) * 0.4) + 64 * (1 << 20),
             f"{basis}{ws_basis}; {sampler.source}"),
        Term("non_torch", non_torch, False, int(nt.get("uncertainty")), nt.source),
        Term("cuda_graphs", graphs, eager, 0 if eager else int(cg.get("uncertainty")), how, subtracted=subtracted),
    )
    return _Runtime(terms, peak, non_torch, graphs, subtracted, peak_flashinfer)


def usage_context(launch) -> str:
    """"llm" for the Python LLM class (UsageContext.LLM_CLASS), else "serve" (OPENAI_API_SERVER)."""
    return "llm" if str(launch.program or "").split("(")[0].strip() in ("LLM", "vllm.LLM") else "serve"


def _vllm_batch(launch, spec: ModelSpec, gpu: Gpu, cuda_total: int, generation: str, max_model_len: int, f):
    """max_num_batched_tokens and max_num_seqs as EngineArgs defaults them for the usage context."""
    mnbt = as_int(option(launch, "max_num_batched_tokens"), "--max-num-batched-tokens")
    mns = as_int(option(launch, "max_num_seqs"), "--max-num-seqs")
    chunked_opt = option(launch, "enable_chunked_prefill")
    if generation == "v0":
        d = f("v0_batch_defaults")
        mns = mns or int(d.get("max_num_seqs"))
        if chunked_opt is None:
            # interleaved sliding windows run as full attention in V0 (see v0_interleaved_window_cap).
            # MLA does not matter here: 0.7.x turns chunked prefill off for MLA only after the
            # scheduler config has sized max_num_batched_tokens (config.py@v0.7.3 VllmConfig).
            types = set(kvmod.layer_types(spec))
            uniform_window = types == {"sliding"}
            chunked = (max_model_len > 32768 and not uniform_window
                       and bool(f("v0_long_context_chunked").value))
        else:
            chunked = as_bool(chunked_opt)
        if mnbt is None:
            mnbt = int(d.get("chunked_max_num_batched_tokens")) if chunked else max(max_model_len, 2048)
        return mnbt, mns
    d = f("v1_batch_defaults")
    defaults = d.get("large" if _large_gpu(gpu, cuda_total, d.get("large_rule")) else "small")
    if mnbt is None:
        mnbt = int(defaults[usage_context(launch)])
        if chunked_opt is not None and not as_bool(chunked_opt):
            mnbt = max(max_model_len, mnbt)
        mnbt = min((mns or int(defaults["max_num_seqs"])) * max_model_len, mnbt)
    if mns is None:
        mns = min(int(defaults["max_num_seqs"]), mnbt)
    return mnbt, mns


def _large_gpu(gpu: Gpu, cuda_total: int, rule: str | None) -> bool:
    """Whether EngineArgs picks its "large GPU" batch defaults (rule from v1_batch_defaults)."""
    name = f"{gpu.name or ''} {gpu.key or ''}".lower()
    if rule == "h100_h200":
        return "h100" in name or "h200" in name
    if rule == "70gib":
        return cuda_total >= 70 * GiB
    return cuda_total >= 70 * GiB and "a100" not in name


def _v0_interleaved_cap(launch, spec: ModelSpec, derived_len: int, f, notes: list[str]) -> int:
    """V0 caps the derived max_model_len to the window of an interleaved sliding-window model
    (always up to 0.6.4, only with the XFORMERS backend from 0.6.6)."""
    types = set(kvmod.layer_types(spec))
    window = kvmod.sliding_window(spec)
    if not window or types != {"full", "sliding"}:
        return derived_len
    rule = f("v0_interleaved_window_cap").value
    backend = str(launch.shell.env.get("VLLM_ATTENTION_BACKEND", "")).upper()
    if rule == "always" or (rule == "xformers" and backend == "XFORMERS"):
        if window < derived_len:
            notes.append(f"V0 runs interleaved sliding-window attention as full attention and caps the "
                         f"derived max_model_len to the window ({window:,})")
            return window
    return derived_len


def _mxfp4_padding(spec: ModelSpec, gpu: Gpu, f, notes: list[str],
                   env: dict | None = None) -> tuple[int, int] | None:
    """(intermediate, hidden) multiples the MXFP4 MoE kernel for this GPU pads experts to."""
    q = spec.quant
    if q is None or (q.method or "").lower() != "mxfp4" or spec.moe is None:
        return None
    row = f("mxfp4_moe_padding")
    if row.value == "none":
        return None
    cc = gpu.compute_capability
    if not cc:
        notes.append("GPU compute capability unknown: MXFP4 expert padding not applied")
        return None
    kernel = mxfp4_moe_kernel(row, tuple(cc[:2]), env or {})
    rule = row.get(kernel)
    if kernel == "marlin" and tuple(cc[:2]) >= (9, 0) and not row.get("triton_kernels_shipped"):
        notes.append("MXFP4 MoE on Marlin (weight-only): this release does not ship triton_kernels "
                     f"({row.source.split(';')[0]})")
    return (int(rule["intermediate"]), int(rule["hidden"])) if rule else None


def mxfp4_moe_kernel(row, cc: tuple[int, int], env: dict) -> str:
    """The MXFP4 MoE kernel vLLM picks (get_mxfp4_backend), as the mxfp4_moe_padding row's key:
    marlin | triton | flashinfer | flashinfer_cutlass. triton_kernels is taken as installed
    only where the release ships it."""
    def on(name: str) -> bool:
        return str(env.get(name, "")).strip().lower() in ("1", "true")

    if on("VLLM_MXFP4_USE_MARLIN"):
        return "marlin"
    sm100 = cc == (10, 0) if row.get("flashinfer_sm100") == "exact" else cc[0] == 10
    if sm100:
        cutlass = on("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8_CUTLASS")
        return "flashinfer_cutlass" if cutlass else "flashinfer"
    if cc == (9, 0) and on("VLLM_USE_FLASHINFER_MOE_MXFP4_BF16"):
        return "flashinfer_cutlass"
    below = row.get("triton_cc_below")
    triton = (row.get("triton_kernels_shipped") and cc >= (9, 0)
              and (below is None or cc[0] * 10 + cc[1] < int(below)))
    return "triton" if triton else "marlin"


def _mla_layout(launch, spec: ModelSpec, version: str, f, notes: list[str]) -> str:
    """How this release stores a DeepSeek-style MLA model's KV cache (the mla_kv_cache fact)."""
    if spec.attention is None or spec.attention.kind != "mla":
        return "latent"
    layout = str(f("mla_kv_cache").value)
    if layout.startswith("latent") and as_bool(launch.shell.env.get("VLLM_MLA_DISABLE")):
        layout = "mha_qk_head"
        notes.append("VLLM_MLA_DISABLE=1: plain K/V cache of every attention head instead of the MLA latent")
    elif layout.startswith("mha"):
        notes.append(f"vLLM {version} has no MLA KV cache: K and V of every attention head are stored")
    return layout


def _layers_on(types, pp: int, stage: int, generation: str, hybrid: bool, within_25pct: bool,
               partition: tuple[int, ...] | None = None) -> int:
    """Pages per block the engine allocates on one GPU of `stage`: one memory pool per layer of
    the largest group, each pool shared by one layer of every group (kv_cache_utils
    get_kv_cache_config_from_groups); for a uniform model that is every layer."""
    rng = kvmod.pp_layer_ranges(len(types), pp, partition)[stage]
    groups = kvmod.kv_groups(types, hybrid and generation == "v1", within_25pct)
    group_size = max((sum(1 for i in g if i in rng) for _, g in groups), default=0)
    return group_size


def _hybrid_state(
    spec, tp: int, mdtype: str, bpl: int, block: int, version: str, f, notes: list[str]
) -> int:
    """Mamba / linear-attention layers: their state per sequence, and the attention block size
    vLLM raises so that one attention page holds one state page (hybrid_state_memory fact)."""
    fact = f("hybrid_state_memory")
    state = kvmod.state_bytes_per_sequence(spec, tp, mdtype)
    if not fact.value:
        notes.append(
            f"Mamba / linear-attention layers: how vLLM {version} sizes their state was not read "
            f"(read for {fact.get('read', 'other releases')}); "
            "the plan counts attention layers only"
        )
        return block
    ssm = kvmod.ssm_cache_dtype(spec)
    per_layer = max(
        (kvmod.state_bytes_per_layer(ly, tp, mdtype, ssm) for ly in spec.layers), default=0
    )
    new_block = kvmod.hybrid_block_size(block, bpl, per_layer, mla=spec.is_mla)
    notes.append(
        f"Mamba / linear-attention layers hold {state:,} B of state per sequence per GPU "
        f"(one page per layer per request)"
    )
    if new_block != block:
        notes.append(
            f"attention block size raised from {block} to {new_block} tokens "
            "so that one page holds "
            f"a {per_layer:,} B state page ({fact.source})"
        )
    return new_block
