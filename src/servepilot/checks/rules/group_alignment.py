"""GPTQ / AWQ groups against the tensor-parallel split, on the non-Marlin kernels.

A group-quantized checkpoint stores one scale per `group_size` input rows. The row-parallel
layers (o_proj, down_proj, the shared experts' down_proj) split their input over the ranks;
vLLM's GPTQ and AWQ kernels refuse a shard that does not hold whole groups
(quantization.yaml group_alignment). awq_marlin hands a layer Marlin cannot tile to those AWQ
kernels from 0.7.3, so there too only whole groups matter.
"""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule
from servepilot.checks.rules.fp8_blocks import moe_ranks

KNOWLEDGE = "servepilot/engines/vllm/knowledge/quantization.yaml"


def row_parallel_inputs(spec, tp: int) -> list[tuple[str, int, int]]:
    """(layer, full input size, shard) of each row-parallel quantized linear, in module order;
    sizes the split does not divide are left to the tensor-parallel rules."""
    out = []
    for i, layer in enumerate(spec.layers):
        if layer.mixer in ("full", "sliding", "chunked") and layer.num_heads and not spec.is_mla:
            width = layer.num_heads * (layer.v_head_dim or layer.head_dim)
            out.append((f"layer {i} self_attn.o_proj", width))
        if layer.mlp == "dense" and layer.mlp_intermediate:
            out.append((f"layer {i} mlp.down_proj", layer.mlp_intermediate))
        if layer.mlp == "moe" and layer.shared_intermediate:
            out.append((f"layer {i} mlp.shared_experts.down_proj", layer.shared_intermediate))
    return [(where, size, size // tp) for where, size in out if size and size % tp == 0]


def _kernel_path(dep, method: str, row) -> str | None:
    """Which kernels create the layer: the plain GPTQ/AWQ ones, or None when another rule (or
    nothing) owns the case."""
    if method in ("gptq", "awq"):
        return method
    if method == "awq_marlin" and row.awq_marlin_falls_back:
        return "awq"
    return None


@rule(
    "SP-QUANT-006", "tp_divisibility", "GPTQ/AWQ groups do not divide a tensor-parallel shard",
    facts=(
        "vLLM's GPTQ and AWQ kernels raise 'The input size is not aligned with the quantized "
        "weight shape. This can be caused by too large tensor parallel size.' when a "
        "row-parallel layer's input shard (intermediate_size / tp, heads x head_dim / tp) is "
        "not a whole number of quantization groups.",
        "From 0.7.3 awq_marlin sends layers Marlin cannot tile to those AWQ kernels, so only "
        "whole groups can still stop an AWQ checkpoint; GPUs below Marlin, or "
        "--quantization gptq/awq, run them directly.",
    ),
    sources=(KNOWLEDGE, "vllm/model_executor/layers/quantization/gptq.py@v0.10.2",
             "vllm/model_executor/layers/quantization/awq.py@v0.10.2",
             "vllm/model_executor/layers/quantization/awq_marlin.py@v0.7.3"),
    engines=("vllm",),
)
def group_alignment(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.release import group_alignment as alignment_row

    res = ctx.resolution
    q, spec = res.quant, dep.spec
    version = res.engine_version
    if q is None or not q.supported or spec is None or spec.quant is None or version is None:
        return []
    row = alignment_row(version)
    kernels = _kernel_path(dep, q.method, row) if row is not None else None
    group = spec.quant.group_size if spec.quant.group_size is not None else 128
    tp = sizes.tp(dep.launch)
    if kernels is None or group <= 0 or tp <= 1:
        return []
    bad = [(w, size, part) for w, size, part in row_parallel_inputs(spec, tp)
           if size > group and part % group]
    if not bad:
        return []
    where, size, part = bad[0]
    via = ("awq_marlin falls back to the AWQ kernels for a layer Marlin cannot tile"
           if q.method == "awq_marlin" else f"the {kernels} kernels run this checkpoint")
    detail = (f"{where}: input {size} / TP {tp} = {part} rows per rank, not a multiple of "
              f"group_size {group}; {via}. vLLM {version} stops while building the model:\n"
              f"  {row['message']}")
    good = [d for d in range(tp - 1, 0, -1)
            if all(s % d == 0 and (s // d) % group == 0 for _, s, _ in bad)]
    remedies = [Remedy("flag", f"--tensor-parallel-size {good[0]}",
                       f"{good[0]} GPUs per replica (use pipeline or data parallel for the rest)",
                       {"set": {"tensor_parallel_size": good[0]}, "unset": []})] if good else []
    return [Finding("SP-QUANT-006", "tp_divisibility", "error",
                    f"group_size {group} does not divide {where}'s shard at TP {tp}", detail,
                    (Evidence(f"group_size = {group}", f"{spec.path}/config.json"),
                     Evidence(f"{where} input {size}", f"{spec.path}/config.json"),
                     Evidence("input_size_per_partition % group_size refused", row.source)),
                    tuple(remedies))]


def experts_fallback_row(dep):
    """The release's MoE WNA16 fallback row (quantization.yaml marlin_moe_fallback), or None
    when GPTQ/AWQ experts Marlin cannot tile stay on Marlin."""
    from servepilot.engines.vllm.release import marlin_moe_fallback

    row = marlin_moe_fallback(dep.engine_version) if dep.engine_version else None
    return row if row is not None and row.falls_back else None


@rule(
    "SP-QUANT-007", "tp_divisibility", "GPTQ/AWQ experts Marlin refuses meet MoE WNA16's blocks",
    facts=(
        "From vLLM 0.8.5 a GPTQ/AWQ MoE layer whose expert shard Marlin cannot tile "
        "(intermediate_size_per_partition % max(64, group_size)) runs on the MoE WNA16 kernels.",
        "For 4-bit weights in groups of 32/64/128 and small batches (CUDA-graph capture, decode) "
        "those run a CUDA kernel whose BLOCK_SIZE_K starts at max(128, group_size): "
        "'size_k must divisible by BLOCK_SIZE_K' for the down projection's shard.",
    ),
    sources=(KNOWLEDGE, "csrc/moe/moe_wna16.cu@v0.10.2",
             "vllm/model_executor/layers/fused_moe/fused_moe.py@v0.10.2",
             "vllm/model_executor/layers/quantization/utils/marlin_utils.py@v0.10.2"),
    engines=("vllm",),
)
def moe_wna16_experts(dep, ctx) -> list[Finding]:
    q, spec = ctx.resolution.quant, dep.spec
    if q is None or spec is None or spec.quant is None or spec.moe is None:
        return []
    row = experts_fallback_row(dep) if q.method in ("gptq_marlin", "awq_marlin") else None
    expert, ranks = spec.moe.expert_intermediate_size, moe_ranks(dep)
    group = spec.quant.group_size if spec.quant.group_size is not None else 128
    if row is None or not expert or not ranks or expert % ranks:
        return []
    part = expert // ranks
    marlin_k = max(row.marlin_min_k, group)
    cuda_kernel = spec.quant.bits == row.wna16_cuda_bits and group in row.wna16_cuda_groups
    block_k = max(row.wna16_block_k, group)
    if part % marlin_k == 0 or not cuda_kernel or part % block_k == 0:
        return []
    detail = (f"moe_intermediate_size {expert} over {ranks} ranks = {part} rows per expert: "
              f"MoE Marlin needs a multiple of {marlin_k}, so vLLM {dep.engine_version} runs the "
              f"experts on MoE WNA16, whose CUDA kernel (small batches: CUDA-graph capture, "
              f"decode) needs size_k % BLOCK_SIZE_K ({block_k}) == 0:\n  {row['wna16_message']}")
    remedies = [Remedy("flag", "--enable-expert-parallel",
                       "experts placed whole on the ranks: every shard is the full width",
                       {"set": {"enable_expert_parallel": True}, "unset": []})]
    return [Finding("SP-QUANT-007", "tp_divisibility", "error",
                    f"{q.method} experts split {ranks} ways fit neither Marlin nor MoE WNA16",
                    detail,
                    (Evidence(f"moe_intermediate_size = {expert}, group_size = {group}, "
                              f"{spec.quant.bits}-bit", f"{spec.path}/config.json"),
                     Evidence("MoE Marlin fallback to MoE WNA16 and its BLOCK_SIZE_K", row.source)),
                    tuple(remedies))]
