"""FP8 weights on vLLM's weight-only Marlin kernels: every tensor-parallel shard must tile.

Below compute capability 8.9 (and for compressed-tensors FP8A16 everywhere) vLLM repacks each
FP8 linear layer, and each MoE expert, for Marlin once its weights are loaded; the repack and
then the first Marlin GEMM refuse shard sizes off the kernel's tiles (quantization.yaml
fp8_marlin_shapes, read per release). The shard sizes come from the config and the tensor
parallel split, layer by layer in the order the engine processes the modules.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule
from servepilot.checks.rules.fp8_blocks import moe_ranks

KNOWLEDGE = "servepilot/engines/vllm/knowledge/quantization.yaml"
# the methods whose FP8 linear layers fall back to Marlin below native FP8 (fp8.py,
# fbgemm_fp8.py, compressed_tensors_w8a8_fp8.py / _w8a16_fp8.py)
_FP8_METHODS = ("fp8", "fbgemm_fp8")
_CT_FP8_SCHEMES = ("FP8", "FP8_BLOCK", "FP8A16")


@dataclass(frozen=True)
class Shard:
    """One linear layer's (or expert weight's) Marlin problem on one rank."""
    where: str  # "layer 0 mlp.gate_up_proj"
    size_n: int  # output columns of the partition
    size_k: int  # input rows of the partition
    expert: bool = False


def fp8_on_marlin(dep, q) -> tuple[bool, bool]:
    """(linear layers on Marlin, MoE experts on Marlin) for this checkpoint and GPU."""
    if q is None or not q.supported or dep.spec is None:
        return False, False
    scheme = (dep.spec.quant.quant_algo or "").upper() if dep.spec.quant else ""
    if q.method == "compressed-tensors" and scheme == "FP8A16":
        return True, True  # CompressedTensorsW8A16Fp8: Marlin on every GPU
    compressed = q.method == "compressed-tensors" and scheme in _CT_FP8_SCHEMES
    fp8 = q.method in _FP8_METHODS or compressed
    if not fp8 or not q.fallback:
        return False, False
    return q.linear != "native", bool(q.moe) and q.moe != "native"


def shards(spec, tp: int, expert_ranks: int | None, with_experts: bool) -> list[Shard]:
    """Each quantized linear's partition, in module order: attention, then the MLP or the
    experts and the shared experts. Sizes that do not divide by the split are skipped (the
    tensor-parallel rules own them); MLA, state-space mixers and latent MoE are not modelled."""
    hidden = spec.hidden_size
    if not hidden:
        return []
    out: list[Shard] = []

    def split(size: int, ranks: int) -> int | None:
        return size // ranks if size and ranks and size % ranks == 0 else None

    for i, layer in enumerate(spec.layers):
        if layer.mixer in ("full", "sliding", "chunked") and layer.num_heads and not spec.is_mla:
            heads = split(layer.num_heads, tp)
            kv = max(1, layer.num_kv_heads // tp) if layer.num_kv_heads else None
            if heads and kv and layer.head_dim:
                v_dim = layer.v_head_dim or layer.head_dim
                q_width = heads * layer.head_dim * (2 if layer.q_gate else 1)
                out.append(Shard(f"layer {i} self_attn.qkv_proj",
                                 q_width + kv * (layer.head_dim + v_dim), hidden))
                out.append(Shard(f"layer {i} self_attn.o_proj", hidden, heads * v_dim))
        if layer.mlp == "dense":
            width = split(layer.mlp_intermediate, tp)
            out += _mlp(f"layer {i} mlp", width, hidden, layer.gated_mlp)
        elif layer.mlp == "moe":
            part = split(layer.expert_intermediate, expert_ranks or 0)
            if with_experts and part and not layer.latent:
                width = 2 * part if layer.gated_mlp else part
                out.append(Shard(f"layer {i} mlp.experts (w13)", width, hidden, expert=True))
                out.append(Shard(f"layer {i} mlp.experts (w2)", hidden, part, expert=True))
            shared = split(layer.shared_intermediate, tp)
            out += _mlp(f"layer {i} mlp.shared_experts", shared, hidden, layer.gated_mlp)
    return out


def _mlp(where: str, part: int | None, hidden: int, gated: bool) -> list[Shard]:
    if not part:
        return []
    # gate and up are one merged column-parallel layer: its partition output is their sum
    if gated:
        first = Shard(f"{where}.gate_up_proj", 2 * part, hidden)
    else:
        first = Shard(f"{where}.up_proj", part, hidden)
    return [first, Shard(f"{where}.down_proj", hidden, part)]


def refusal(shard: Shard, row) -> str | None:
    """What the engine raises for this shard, or None when it tiles."""
    if shard.size_k % row.repack_tile_k:
        return (f"RuntimeError: size_k = {shard.size_k} is not divisible by tile_k_size = "
                f"{row['repack_tile_k']}")
    if shard.size_n % row.repack_tile_n:
        return (f"RuntimeError: size_n = {shard.size_n} is not divisible by tile_n_size = "
                f"{row['repack_tile_n']}")
    if shard.expert:
        return None  # the MoE Marlin kernel's own thread tiles were not read
    if not any(shard.size_k % k == 0 and shard.size_n % n == 0 for k, n in row.gemm_tiles):
        return (f"RuntimeError: Invalid thread config: no Marlin thread tile "
                f"(thread_k, thread_n) in {[tuple(t) for t in row.gemm_tiles]} divides "
                f"(size_k, size_n) = ({shard.size_k}, {shard.size_n})")
    return None


def first_refusal(spec, tp: int, expert_ranks, with_linear: bool, with_experts: bool, row):
    for shard in shards(spec, tp, expert_ranks, with_experts):
        if not with_linear and not shard.expert:
            continue
        message = refusal(shard, row)
        if message:
            return shard, message
    return None


@rule(
    "SP-QUANT-003", "quantization_support",
    "FP8 weights on Marlin cannot tile a tensor-parallel shard",
    facts=(
        "Below compute capability 8.9 vLLM runs FP8 checkpoints (fp8, fbgemm_fp8, "
        "compressed-tensors FP8; FP8A16 on every GPU) on weight-only Marlin kernels, "
        "repacked after loading.",
        "Before 0.24 the repack refuses a shard whose input size is not a multiple of 16 or "
        "whose output size is not a multiple of 64 "
        "('size_n = 5472 is not divisible by tile_n_size = 64'), "
        "and the first GEMM needs (k%64, n%128) or (k%128, n%64). The merged gate/up projection's "
        "shard is 2 x intermediate_size / tp.",
        "From 0.24.0 vLLM zero-pads such shapes (marlin_padded_nk) and starts.",
    ),
    sources=(KNOWLEDGE, "csrc/quantization/gptq_marlin/gptq_marlin_repack.cu@v0.10.2",
             "vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py@v0.10.2",
             "vllm/model_executor/layers/quantization/utils/marlin_utils.py@v0.24.0"),
    engines=("vllm",),
)
def fp8_marlin_tiles(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.release import fp8_marlin_shapes

    res = ctx.resolution
    with_linear, with_experts = fp8_on_marlin(dep, res.quant)
    version = res.engine_version
    if not (with_linear or with_experts) or version is None:
        return []
    row = fp8_marlin_shapes(version)
    if row is None or row.pads:
        return []
    tp = sizes.tp(dep.launch)
    found = first_refusal(dep.spec, tp, moe_ranks(dep), with_linear, with_experts, row)
    if found is None:
        return []
    shard, message = found
    cc = res.gpu_cc
    stage = ("the first forward pass (memory profiling)" if "thread config" in message
             else "weight processing, right after the weights are loaded")
    detail = (f"vLLM {version} runs the FP8 weights on weight-only Marlin"
              + (f" (compute capability {cc[0]}.{cc[1]} has no native FP8)" if cc else "")
              + f". At TP {tp}, {shard.where} has a shard of (size_k {shard.size_k}, size_n "
              f"{shard.size_n}); it stops at {stage}, with:\n  {message}")
    evidence = (Evidence(f"{shard.where}: size_k {shard.size_k}, size_n {shard.size_n} at TP {tp}",
                         f"{dep.spec.path}/config.json"),
                Evidence(f"Marlin FP8 tiles in vLLM {version}: repack k%{row['repack_tile_k']}, "
                         f"n%{row['repack_tile_n']}", row.source))
    return [Finding("SP-QUANT-003", "quantization_support", "error",
                    f"FP8 Marlin cannot tile {shard.where} at TP {tp}", detail, evidence,
                    tuple(_remedies(dep, tp, with_linear, with_experts, row)))]


def _remedies(dep, tp: int, with_linear: bool, with_experts: bool, row) -> list[Remedy]:
    out = []
    ep = bool(dep.launch.get("enable_expert_parallel"))
    for smaller in range(tp - 1, 0, -1):
        ranks = 1 if ep else smaller
        if _splits_evenly(dep.spec, smaller, ranks) and first_refusal(
                dep.spec, smaller, ranks, with_linear, with_experts, row) is None:
            out.append(Remedy("flag", f"--tensor-parallel-size {smaller}",
                              "every shard tiles; fewer GPUs per replica (more memory per GPU)",
                              {"set": {"tensor_parallel_size": smaller}, "unset": []}))
            break
    out.append(Remedy("upgrade", "pip install 'vllm>=0.24.0'",
                      "vLLM 0.24 pads Marlin shapes that do not tile",
                      {"upgrade": {"package": "vllm", "specifier": ">=0.24.0"}}))
    scheme = (dep.spec.quant.quant_algo or "").upper() if dep.spec.quant else ""
    if scheme != "FP8A16":
        out.append(Remedy("hardware", "GPUs with native FP8 (compute capability >= 8.9)",
                          "native FP8 kernels do not go through Marlin",
                          {"hardware": {"min_compute_capability": "8.9"}}))
    return out


def _splits_evenly(spec, tp: int, expert_ranks: int) -> bool:
    """Whether vLLM can split every layer over `tp` ranks at all (heads, KV heads, MLP widths):
    a remedy must not trade the Marlin refusal for a tensor-parallel one."""
    for layer in spec.layers:
        kv = layer.num_kv_heads
        if layer.num_heads and (layer.num_heads % tp or (kv and kv % tp and tp % kv)):
            return False
        widths = ((layer.mlp_intermediate, tp), (layer.shared_intermediate, tp),
                  (layer.expert_intermediate, expert_ranks))
        if any(size and size % ranks for size, ranks in widths):
            return False
    return True
