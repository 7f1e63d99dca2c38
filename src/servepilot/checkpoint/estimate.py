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

import dataclasses
from dataclasses import dataclass

from servepilot.checkpoint.spec import LayerSpec, ModelSpec

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
class TensorShape:
    """One tensor the architecture holds, in Llama / DeepSeek naming, and the part it counts in."""

    name: str
    shape: tuple[int, ...]
    part: str  # embedding | attention | mixer | dense_mlp | experts | other | mtp
    linear: bool = True  # a weight matrix (quantizable), not a norm or embedding

    @property
    def params(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class ParamEstimate:
    embedding: int
    attention: int
    dense_mlp: int
    experts: int  # routed + shared experts and routers
    other: int  # norms, lm_head
    mtp: int
    mixer: int = 0  # Mamba / linear-attention mixers
    active: int = 0  # per token: all but the routed experts not chosen (MTP left out)

    @property
    def total(self) -> int:
        """The model as served: MTP / next-n layers are counted apart (`mtp`)."""
        return (
            self.embedding
            + self.attention
            + self.mixer
            + self.dense_mlp
            + self.experts
            + self.other
        )

    @property
    def total_with_mtp(self) -> int:
        return self.total + self.mtp


def model_layers(spec: ModelSpec) -> tuple[LayerSpec, ...]:
    """The spec's layers; for a spec built without them (a GGUF file, a hand-made spec) the
    uniform layers its AttentionSpec and MoESpec describe."""
    if spec.layers:
        return spec.layers
    a = spec.attention
    if a is None:
        return ()
    moe = spec.moe if spec.is_moe else None
    inter = spec.intermediate_size or 0
    types = a.layer_types if len(a.layer_types) >= a.num_layers else ()
    out = []
    for i in range(a.num_layers):
        word = (
            types[i]
            if types
            else (
                "sliding"
                if a.sliding_window and a.num_sliding_layers and not a.num_full_layers
                else "full"
            )
        )
        mixer = "sliding" if "sliding" in word or "local" in word else "full"
        fields = dict(
            mixer=mixer,
            window=a.sliding_window if mixer == "sliding" else None,
            num_heads=a.num_heads,
            num_kv_heads=a.num_kv_heads,
            head_dim=a.head_dim,
            v_head_dim=a.v_head_dim or a.head_dim,
        )
        is_moe = bool(moe) and i >= moe.first_dense_layers and i % max(1, moe.moe_layer_freq) == 0
        if is_moe:
            ei = moe.expert_intermediate_size or inter
            fields.update(
                mlp="moe",
                experts=moe.num_experts,
                experts_per_token=moe.experts_per_token,
                expert_intermediate=ei,
                shared_intermediate=moe.num_shared_experts * ei,
            )
        else:
            fields.update(mlp="dense", mlp_intermediate=inter)
        out.append(LayerSpec(**fields))
    return tuple(out)


def _attention_tensors(spec: ModelSpec, layer: LayerSpec, p: str, h: int) -> list[TensorShape]:
    a = spec.attention
    out = []

    def add(name, *shape, linear=True):
        out.append(TensorShape(p + name, tuple(shape), "attention", linear))

    if a is not None and a.kind == "mla":
        nope, rope = a.qk_nope_head_dim or 128, a.qk_rope_head_dim or 64
        vd, lora = a.v_head_dim or 128, a.kv_lora_rank or 512
        if a.q_lora_rank:
            add("self_attn.q_a_proj.weight", a.q_lora_rank, h)
            add("self_attn.q_a_layernorm.weight", a.q_lora_rank, linear=False)
            add("self_attn.q_b_proj.weight", a.num_heads * (nope + rope), a.q_lora_rank)
        else:
            add("self_attn.q_proj.weight", a.num_heads * (nope + rope), h)
        add("self_attn.kv_a_proj_with_mqa.weight", lora + rope, h)
        add("self_attn.kv_a_layernorm.weight", lora, linear=False)
        add("self_attn.kv_b_proj.weight", a.num_heads * (nope + vd), lora)
        add("self_attn.o_proj.weight", h, a.num_heads * vd)
        return out
    hd, v = layer.head_dim, layer.v_head_dim or layer.head_dim
    add("self_attn.q_proj.weight", layer.num_heads * hd * (2 if layer.q_gate else 1), h)
    add("self_attn.k_proj.weight", layer.num_kv_heads * hd, h)
    add("self_attn.v_proj.weight", layer.num_kv_heads * v, h)
    add("self_attn.o_proj.weight", h, layer.num_heads * v)
    return out


def _mixer_tensors(layer: LayerSpec, p: str, h: int) -> list[TensorShape]:
    """Mamba-1/2, gated delta net and lightning attention mixers (vLLM's layer code)."""
    st = layer.state
    out = []

    def add(name, *shape, linear=True):
        out.append(TensorShape(p + name, tuple(shape), "mixer", linear))

    if st is None:
        return out
    if (
        st.kind == "mamba2"
    ):  # mamba_mixer2.py: in_proj (z, x, B, C, dt), conv1d, A, D, dt_bias, norm, out_proj
        i, gn = st.intermediate, st.n_groups * st.state_size
        add("mixer.in_proj.weight", 2 * i + 2 * gn + st.num_heads, h)
        add("mixer.conv1d.weight", i + 2 * gn, st.conv_kernel + 1, linear=False)  # weight + bias
        add("mixer.A_log", 3 * st.num_heads, linear=False)  # A_log, D, dt_bias
        add("mixer.norm.weight", i, linear=False)
        add("mixer.out_proj.weight", h, i)
    elif st.kind == "mamba1":  # mamba_mixer.py
        i = st.intermediate
        add("mamba.in_proj.weight", 2 * i, h)
        add("mamba.conv1d.weight", i, st.conv_kernel + 1, linear=False)
        add("mamba.x_proj.weight", st.dt_rank + 2 * st.state_size, i)
        add("mamba.dt_proj.weight", i, st.dt_rank + 1)
        add("mamba.A_log", i, st.state_size + 1, linear=False)  # A_log and D
        add("mamba.out_proj.weight", h, i)
    elif st.kind == "gdn":  # qwen3_next.py Qwen3NextGatedDeltaNet
        key, value = st.num_k_heads * st.k_head_dim, st.num_heads * st.head_dim
        add("linear_attn.in_proj_qkvz.weight", 2 * key + 2 * value, h)
        add("linear_attn.in_proj_ba.weight", 2 * st.num_heads, h)
        add("linear_attn.conv1d.weight", 2 * key + value, st.conv_kernel, linear=False)
        add("linear_attn.A_log", 2 * st.num_heads, linear=False)  # A_log and dt_bias
        add("linear_attn.norm.weight", st.head_dim, linear=False)
        add("linear_attn.out_proj.weight", h, value)
    elif st.kind == "lightning":  # minimax_text_01.py MiniMaxText01LinearAttention
        inner = st.num_heads * st.head_dim
        add("self_attn.qkv_proj.weight", 3 * inner, h)
        add("self_attn.output_gate.weight", inner, h)
        add("self_attn.norm.weight", inner, linear=False)
        add("self_attn.out_proj.weight", h, inner)
    return out


def _mlp_tensors(
    layer: LayerSpec, p: str, h: int, part_dense: str = "dense_mlp", part_experts: str = "experts"
) -> list[TensorShape]:
    out = []
    mats = 3 if layer.gated_mlp else 2
    if layer.mlp == "dense" and layer.mlp_intermediate:
        names = ("gate_proj", "up_proj", "down_proj") if mats == 3 else ("up_proj", "down_proj")
        for n in names:
            shape = (h, layer.mlp_intermediate) if n == "down_proj" else (layer.mlp_intermediate, h)
            out.append(TensorShape(p + f"mlp.{n}.weight", shape, part_dense))
    elif layer.mlp == "linear_proj":
        out.append(TensorShape(p + "mlp.linear.weight", (h, h), part_dense))
    elif layer.mlp == "moe":
        width = layer.latent or h
        ei = layer.expert_intermediate
        out.append(TensorShape(p + "mlp.gate.weight", (layer.experts, h), part_experts, False))
        names = ("gate_proj", "up_proj", "down_proj") if mats == 3 else ("up_proj", "down_proj")
        for n in names:
            shape = (width, ei) if n == "down_proj" else (ei, width)
            out.append(
                TensorShape(p + f"mlp.experts.{n}.weight", (layer.experts, *shape), part_experts)
            )
        if layer.latent:
            out.append(
                TensorShape(p + "mlp.fc1_latent_proj.weight", (layer.latent, h), part_experts)
            )
            out.append(
                TensorShape(p + "mlp.fc2_latent_proj.weight", (h, layer.latent), part_experts)
            )
        if layer.shared_intermediate:
            si = layer.shared_intermediate
            for n in names:
                shape = (h, si) if n == "down_proj" else (si, h)
                out.append(TensorShape(p + f"mlp.shared_experts.{n}.weight", shape, part_experts))
    return out


def tensor_shapes(spec: ModelSpec) -> list[TensorShape]:
    """Every tensor of the text model, layer by layer: the one count that inspect (parameters),
    plan (weights per GPU when no headers say) and check (through plan) all read."""
    h, vocab = spec.hidden_size, spec.vocab_size
    layers = model_layers(spec)
    if not layers or not h:
        return []
    out: list[TensorShape] = []
    if vocab:
        out.append(TensorShape("model.embed_tokens.weight", (vocab, h), "embedding", False))
        if not spec.tie_word_embeddings:
            out.append(TensorShape("lm_head.weight", (vocab, h), "other", False))
    out.append(TensorShape("model.norm.weight", (h,), "other", False))
    for i, layer in enumerate(layers):
        p = f"model.layers.{i}."
        single = (
            layer.mixer == "none" or layer.mlp == "none"
        )  # Nemotron-H / NAS blocks: one norm per mixer
        out.append(TensorShape(p + "input_layernorm.weight", (h,), "other", False))
        if not single:
            out.append(TensorShape(p + "post_attention_layernorm.weight", (h,), "other", False))
        if layer.has_kv:
            out.extend(_attention_tensors(spec, layer, p, h))
        elif layer.mixer == "linear_proj":
            out.append(TensorShape(p + "self_attn.linear.weight", (h, h), "attention"))
        out.extend(_mixer_tensors(layer, p, h))
        out.extend(_mlp_tensors(layer, p, h))
    out.extend(_mtp_tensors(spec, layers, h))
    return out


def _mtp_tensors(spec: ModelSpec, layers: tuple[LayerSpec, ...], h: int) -> list[TensorShape]:
    """MTP / next-n layers after the decoder layers (DeepSeek-V3: layer 61): one decoder layer
    (attention as a full layer, the MLP of the last layer) plus eh_proj (2h x h) and two norms."""
    if spec.mtp_layers <= 0:
        return []
    attn = next((ly for ly in layers if ly.mixer == "full"), None)
    last = layers[-1]
    mlp_layer = next((ly for ly in reversed(layers) if ly.mlp == "moe"), last)
    out = []
    for k in range(spec.mtp_layers):
        p = f"model.layers.{len(layers) + k}."
        shapes = (_attention_tensors(spec, attn, p, h) if attn else []) + _mlp_tensors(
            mlp_layer, p, h
        )
        shapes += [
            TensorShape(p + "eh_proj.weight", (h, 2 * h), "mtp"),
            TensorShape(p + "enorm.weight", (2 * h,), "mtp", False),
        ]
        out.extend(TensorShape(t.name, t.shape, "mtp", t.linear) for t in shapes)
    return out


def estimate_params(spec: ModelSpec) -> ParamEstimate | None:
    """Parameters by part, or None when the config lacks the sizes to count them."""
    if spec.attention is None and not spec.layers or not spec.hidden_size or not spec.vocab_size:
        return None
    parts: dict[str, int] = {}
    for t in tensor_shapes(spec):
        parts[t.part] = parts.get(t.part, 0) + t.params
    if not parts:
        return None
    unused = 0  # routed experts a token does not reach
    for layer in model_layers(spec):
        if layer.mlp == "moe" and layer.experts:
            per_expert = (
                (3 if layer.gated_mlp else 2)
                * (layer.latent or spec.hidden_size)
                * layer.expert_intermediate
            )
            unused += max(0, layer.experts - layer.experts_per_token) * per_expert
    est = ParamEstimate(
        embedding=parts.get("embedding", 0),
        attention=parts.get("attention", 0),
        dense_mlp=parts.get("dense_mlp", 0),
        experts=parts.get("experts", 0),
        other=parts.get("other", 0),
        mtp=parts.get("mtp", 0),
        mixer=parts.get("mixer", 0),
    )
    return dataclasses.replace(est, active=est.total - unused - est.embedding)


def estimate_bytes_from_architecture(spec: ModelSpec) -> int | None:
    """Weight bytes from the parameter estimate, the config dtype and the declared quantization."""
    est = estimate_params(spec)
    if est is None:
        return None
    base = DTYPE_BYTES.get((spec.dtype or "bfloat16").lower(), 2)
    q = spec.quant
    if q is None:
        return est.total_with_mtp * base
    from servepilot.checkpoint.quant import mixed_precision_algos

    mixed = mixed_precision_algos(q)
    if mixed:  # modelopt MIXED_PRECISION: experts and the other linears each at their own bits
        def bits_of(kind: str) -> float:
            return QUANT_BITS.get(("modelopt", mixed.get(kind, "")), base * 8)

        attention_kept = any("self_attn" in p or "attn" == p for p in q.ignore)
        other = est.dense_mlp + est.mixer + est.mtp + (0 if attention_kept else est.attention)
        kept = est.total_with_mtp - other - est.experts
        return int(est.experts * bits_of("experts") / 8 + other * bits_of("other") / 8) + kept * base
    bits = QUANT_BITS.get((q.method, q.quant_algo)) or QUANT_BITS.get((q.method, None))
    if bits is None and q.bits and q.group_size and q.group_size > 0:
        bits = q.bits + 16 / q.group_size  # one 16-bit scale per group (AWQ/GPTQ/int4 group 32: 4.5 bits)
    if bits is None:
        bits = float(q.bits) if q.bits else base * 8
    # Quantized: the linear layers of the MLPs and experts; attention too unless the ignore
    # list keeps it unquantized (gpt-oss keeps self_attn in BF16, Kimi-K2.5-NVFP4 too).
    attention_kept = any("self_attn" in pattern or "attn" == pattern for pattern in q.ignore)
    quantized = (
        est.dense_mlp + est.experts + est.mixer + est.mtp + (0 if attention_kept else est.attention)
    )
    kept = est.total_with_mtp - quantized
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
