"""The KV budget of one GPU, term by term, as each engine computes it.

vLLM (vllm/v1/worker/gpu_worker.py determine_available_memory, vllm/utils/mem_utils.py
memory_profiling, @v0.16.0):

    requested = ceil(total × gpu_memory_utilization)
    available = requested − weights − torch activation peak of the profile run − non-torch increase
                [− CUDA graph estimate, from 0.21]

--kv-cache-memory-bytes replaces all of it. The profile run is one forward pass over
max_num_batched_tokens tokens and one sampler pass over max_num_seqs requests; the planner
estimates its peak from the architecture (MLP / MoE intermediates, hidden states, logits),
which is the least certain term: the uncertainty is stated beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.checkpoint.spec import ModelSpec
from servepilot.planning.kv import cdiv

GiB = 1 << 30


@dataclass(frozen=True)
class Term:
    """One line of the budget."""

    name: str  # "weights", "activation_peak", "non_torch", "cuda_graphs", "driver_reserved", ...
    bytes: int
    exact: bool
    uncertainty_bytes: int = 0
    basis: str = ""  # how it was computed, with its source
    subtracted: bool = True  # whether the engine takes it out of the KV budget


def activation_peak(spec: ModelSpec, *, tp: int, expert_parallel: bool, batched_tokens: int, num_seqs: int,
                    sampler_bytes_per_logit: float, moe_chunk_tokens: int = 32768,
                    act_bytes: int = 2, moe_cache13_shared: bool = True) -> tuple[int, str]:
    """Estimated torch peak of vLLM's profile run on one GPU, and how it was reached.

    forward = 3 hidden-sized buffers per token (residual, hidden states, the normed MLP input;
              RMSNorm adds the residual in place)
              + the larger of the attention projections and the MLP / fused-MoE intermediates;
    sampler = num_seqs × vocab × bytes per logit (logits, float32 copy, sort, probabilities);
    peak    = max(forward, sampler): the forward's buffers are freed before sampling.
    """
    tp = max(1, tp)
    h = spec.hidden_size or 0
    t = max(1, batched_tokens)
    att = spec.attention
    hidden = 3 * t * h * act_bytes
    attn = 0
    if att is not None:
        if att.kind == "mla":
            nope, rope, vd = att.qk_nope_head_dim or 128, att.qk_rope_head_dim or 64, att.v_head_dim or 128
            attn = t * cdiv(att.num_heads, tp) * (2 * (nope + rope) + 2 * vd) * act_bytes
        else:
            heads = cdiv(att.num_heads, tp) + 2 * max(1, att.num_kv_heads // tp)
            attn = t * (heads + cdiv(att.num_heads, tp)) * att.head_dim * act_bytes
    inter = spec.intermediate_size or 4 * h
    dense = t * 3 * cdiv(inter, tp) * act_bytes
    mlp = dense
    moe = spec.moe
    if moe is not None and moe.num_experts:
        ei = moe.expert_intermediate_size or inter
        ei_gpu = ei if expert_parallel else cdiv(ei, tp)
        m = min(t, moe_chunk_tokens) if moe_chunk_tokens else t  # 0: the release does not chunk
        k = max(1, moe.experts_per_token)
        # fused_experts' caches: gate_up output (2 x intermediate), activation (intermediate) and
        # down output (hidden); the first and last share one buffer from 0.8 (cache13)
        cache13 = max(2 * ei_gpu, h) if moe_cache13_shared else 2 * ei_gpu + h
        fused = m * k * cache13 * act_bytes + m * k * ei_gpu * act_bytes + t * moe.num_experts * 4
        shared = t * 3 * cdiv(ei * moe.num_shared_experts, tp) * act_bytes
        mlp = max(dense if moe.first_dense_layers else 0, fused + shared)
    forward = hidden + max(attn, mlp)
    vocab = spec.vocab_size or 0
    sampler = int(min(num_seqs, t) * vocab * sampler_bytes_per_logit)
    peak = max(forward, sampler)
    which = "sampler warm-up" if sampler >= forward else "forward pass"
    basis = (f"max(forward over {t:,} batched tokens ≈ {forward / GiB:.2f} GiB, sampler over "
             f"{min(num_seqs, t):,} seqs × {vocab:,} vocab × {sampler_bytes_per_logit:g} B ≈ {sampler / GiB:.2f} GiB): "
             f"{which}")
    return int(peak), basis
