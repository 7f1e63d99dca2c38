"""Parameter count and weight bytes from the architecture alone (no weights on disk).

Counted: token embedding, per layer the attention projections (MLA: q_a/q_b or q, kv_a with
the rope part, kv_b, o; standard: q, k, v, o), the two RMSNorms, dense gated MLPs
(gate/up/down = 3 x hidden x intermediate), MoE layers (routed + shared experts and the
router), next-token-prediction (MTP) layers, the final norm and lm_head unless tied. Biases
and vision towers are left out, which is why the result is marked as an estimate.

Checks against published counts: Llama-3.1-8B gives 8,030,261,248 (its index: 16,060,522,496
bytes / 2, exact); gpt-oss-20b 20.91 B (published 20,914,757,184); DeepSeek-V3 671.0 B for the
main model plus 11.6 B for its MTP layer (DeepSeek reports 671 B + 14 B, the MTP module
counting its own embedding and head, which this count shares with the main model).
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.checkpoint.spec import ModelSpec

# Bytes per parameter of the unquantized dtypes a config.json names.
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1}

# Bits per quantized weight including its scales: NVFP4 = 4 + one 8-bit scale per 16
# (4.5); MXFP4 = 4 + one 8-bit scale per 32 (4.25); block FP8 = 8 + one 32-bit scale per
# 128x128 (~8.002); bitsandbytes NF4 = 4 + absmax per 64 (~4.5). Integer schemes with a
# group size (AWQ, GPTQ, compressed-tensors W4A16) use bits + 16 / group_size.
QUANT_BITS = {("modelopt", "NVFP4"): 4.5, ("modelopt", "FP8"): 8.0, ("fp8", None): 8.0, ("mxfp4", None): 4.25,
              ("compressed-tensors", "NVFP4"): 4.5, ("compressed-tensors", "FP8"): 8.0, ("bitsandbytes", "NF4"): 4.5,
              ("bitsandbytes", "FP4"): 4.5, ("bitsandbytes", "INT4"): 4.5, ("bitsandbytes", "INT8"): 8.0}


@dataclass(frozen=True)
class ParamEstimate:
    embedding: int
    attention: int
    dense_mlp: int
    experts: int  # routed + shared experts and routers
    other: int  # norms, lm_head, MTP extras
    mtp: int

    @property
    def total(self) -> int:
        return self.embedding + self.attention + self.dense_mlp + self.experts + self.other + self.mtp


def _attention_params(spec: ModelSpec) -> int:
    a, h = spec.attention, spec.hidden_size or 0
    if a is None:
        return 0
    if a.kind == "mla":
        nope, rope = a.qk_nope_head_dim or 0, a.qk_rope_head_dim or 0
        v = a.v_head_dim or nope
        q_head = a.num_heads * (nope + rope)
        q = (h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * q_head) if a.q_lora_rank else h * q_head
        kv = h * ((a.kv_lora_rank or 0) + rope) + (a.kv_lora_rank or 0) + (a.kv_lora_rank or 0) * a.num_heads * (nope + v)
        o = a.num_heads * v * h
        return q + kv + o
    hd = a.head_dim
    v = a.v_head_dim or hd
    return h * a.num_heads * hd + h * a.num_kv_heads * (hd + v) + a.num_heads * v * h


def estimate_params(spec: ModelSpec) -> ParamEstimate | None:
    """Parameters by part, or None when the config lacks the sizes to count them."""
    a, h, vocab = spec.attention, spec.hidden_size, spec.vocab_size
    if a is None or not h or not vocab:
        return None
    layers = a.num_layers
    attn_layer = _attention_params(spec)
    norms_layer = 2 * h
    moe = spec.moe if spec.is_moe else None
    inter = spec.intermediate_size or 0
    if moe:
        e_inter = moe.expert_intermediate_size or inter
        moe_layers = sum(
            1 for i in range(moe.first_dense_layers, layers) if (i - moe.first_dense_layers) % max(moe.moe_layer_freq, 1) == 0
        )
        dense_layers = layers - moe_layers
        expert_layer = (moe.num_experts + moe.num_shared_experts) * 3 * h * e_inter + h * moe.num_experts
    else:
        moe_layers, dense_layers, expert_layer = 0, layers, 0
    dense_layer = 3 * h * inter
    # An MTP layer is one more decoder layer (MoE when the model is) plus the projection of
    # [embedding; hidden] back to hidden (eh_proj, 2h x h) and its two norms.
    mtp_layer = attn_layer + norms_layer + (expert_layer if moe else dense_layer) + 2 * h * h + 2 * h
    return ParamEstimate(
        embedding=vocab * h,
        attention=layers * attn_layer,
        dense_mlp=dense_layers * dense_layer,
        experts=moe_layers * expert_layer,
        other=layers * norms_layer + h + (0 if spec.tie_word_embeddings else vocab * h),
        mtp=spec.mtp_layers * mtp_layer,
    )


def estimate_bytes_from_architecture(spec: ModelSpec) -> int | None:
    """Weight bytes from the parameter estimate, the config dtype and the declared quantization."""
    est = estimate_params(spec)
    if est is None:
        return None
    base = DTYPE_BYTES.get((spec.dtype or "bfloat16").lower(), 2)
    q = spec.quant
    if q is None:
        return est.total * base
    bits = QUANT_BITS.get((q.method, q.quant_algo)) or QUANT_BITS.get((q.method, None))
    if bits is None and q.bits and q.group_size and q.group_size > 0:
        bits = q.bits + 16 / q.group_size  # one 16-bit scale per group (AWQ/GPTQ/int4 group 32: 4.5 bits)
    if bits is None:
        bits = float(q.bits) if q.bits else base * 8
    # Quantized: the linear layers of the MLPs and experts; attention too unless the ignore
    # list keeps it unquantized (gpt-oss keeps self_attn in BF16, Kimi-K2.5-NVFP4 too).
    attention_kept = any("self_attn" in pattern or "attn" == pattern for pattern in q.ignore)
    quantized = est.dense_mlp + est.experts + est.mtp + (0 if attention_kept else est.attention)
    kept = est.total - quantized
    return int(quantized * bits / 8) + kept * base


def estimate_param_bytes(spec: ModelSpec) -> int:
    """Bytes of weights the engine will load, best source first (for `plan`).

    safetensors/GGUF headers when read (the index's total_size if that is larger, i.e. some
    shards were missing or damaged), else the index's total_size, else the architecture
    estimate. Raises BadInput when none is available.
    """
    from servepilot.errors import BadInput

    w = spec.weights
    if w is not None and w.total_bytes:
        if w.index_total_bytes and w.index_total_bytes > w.total_bytes:
            return w.index_total_bytes
        return w.total_bytes
    guess = estimate_bytes_from_architecture(spec)
    if guess is None:
        raise BadInput(
            "cannot tell how much the weights weigh: no safetensors/GGUF headers, no index and "
            "no hidden_size/vocab_size/layer counts in config.json",
            path=spec.path,
        )
    return guess
