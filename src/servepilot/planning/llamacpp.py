"""llama.cpp: weights offloaded by -ngl, a KV cache of n_ctx tokens in the cache types, compute buffers."""

from __future__ import annotations

from servepilot.checkpoint.spec import ModelSpec
from servepilot.errors import BadInput
from servepilot.hardware.cluster import Gpu
from servepilot.planning.budget import Term
from servepilot.planning.common import derived_max_model_len
from servepilot.planning.options import as_int, option
from servepilot.planning.result import GpuRow, MemoryPlan

# -- llama.cpp ----------------------------------------------------------------------------

# Bytes per element of llama.cpp cache types (ggml block sizes: q8_0 = 34 B per 32 values).
_GGML_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
               "q5_0": 22 / 32, "q5_1": 24 / 32, "iq4_nl": 18 / 32}


def plan_llamacpp(dep, spec: ModelSpec, gpu: Gpu, *, dtype: str, block, notes: list[str], tp,
                   available_override: int | None = None, weights_override: int | None = None,
                  backend: str | None = None) -> MemoryPlan:
    launch = dep.launch
    notes = list(notes)
    att = spec.attention
    if att is None:
        raise BadInput(f"{spec.path}: the attention geometry is unknown, so llama.cpp's KV cache cannot be sized")
    n_layer = att.num_layers
    n_ctx = as_int(option(launch, "ctx_size", "ctx-size", "n_ctx", "c"), "--ctx-size")
    if not n_ctx:
        n_ctx = spec.gguf.context_length if spec.gguf and spec.gguf.context_length else derived_max_model_len(spec)
        notes.append(f"--ctx-size not given (or 0): the model's training context {n_ctx:,} assumed (older builds "
                     "default to 4096 / 512)")
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
    weights = (
        weights_override
        if weights_override is not None
        else int(file_bytes * min(ngl, n_layer + 1) / (n_layer + 1) / n_gpus)
    )
    kv_total = n_ctx * on_gpu * bpl
    kv_gpu = cdiv_int(kv_total, n_gpus)
    compute = 512 * (1 << 20)
    total = gpu.memory_bytes
    free = total - weights - kv_gpu - compute
    terms = (
        Term("weights", weights, False, int(weights * 0.02), f"GGUF size × {min(ngl, n_layer + 1)}/{n_layer + 1} "
                                                             f"offloaded layers / {n_gpus} GPU(s)"),
        Term("kv_cache", kv_gpu, True, 0, f"n_ctx {n_ctx:,} × {on_gpu} layers × {bpl:,} B (K {type_k}, V {type_v})"),
        Term("compute_buffer", compute, False, compute, "llama.cpp compute buffers (grow with --batch-size / "
                                                        "--ubatch-size)"),
    )
    fits = free >= 0
    max_ctx = max(0, (total - weights - compute) * n_gpus // max(1, on_gpu * bpl))
    rows = tuple(GpuRow(i, g.name, 0, 0, 0, g.memory_bytes, weights, compute, kv_gpu,
                        g.memory_bytes - weights - compute - kv_gpu)
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
