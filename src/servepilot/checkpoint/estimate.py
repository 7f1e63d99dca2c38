"""Parameter count and weight bytes from the architecture alone (no weights on disk): the one
count inspect, check and plan share (issue 11: one owner per derived fact).

Counted layer by layer from ModelSpec.layers (checkpoint/layers.py): token embedding; per
layer its mixer (attention: MLA q_a/q_b or q, kv_a with the rope part, kv_b, o; standard q
(doubled with an output gate), k, v, o; Mamba-1/2, gated delta net or lightning attention
mixers with their conv and state parameters; a NAS linear replacement), its MLP (dense gated
or up/down only, MoE routed + shared experts, router and latent projections), its norms; the
final norm and lm_head unless tied; MTP / next-n layers apart. Biases and vision towers are
left out, which is why the result is marked as an estimate.

Checks against published counts: bench/bench_zoo.py over the real configs in bench/zoo
(73 of 74 within 3%); Llama-3.1-8B gives 8,030,261,248 (its index: 16,060,522,496 bytes / 2,
exact); DeepSeek-V3 671.0 B for the main model plus its MTP layer apart.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import lru_cache

from servepilot.checkpoint.spec import LayerSpec, ModelSpec

# Bytes per parameter of the unquantized dtypes a config.json names.
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1}

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


# The last specs counted: check counts the same spec for its summary, its plan and each
# KV dtype alternative. Keyed by identity (a ModelSpec holds dicts, so it is not hashable);
# the spec itself is kept so that its id cannot be reused while the entry lives.
_SHAPES: dict[int, tuple[ModelSpec, list]] = {}
_SHAPES_KEPT = 4


def tensor_shapes(spec: ModelSpec) -> list[TensorShape]:
    """Every tensor of the text model, layer by layer: the one count that inspect (parameters),
    plan (weights per GPU when no headers say) and check (through plan) all read."""
    hit = _SHAPES.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    shapes = _tensor_shapes(spec)
    if len(_SHAPES) >= _SHAPES_KEPT:
        _SHAPES.pop(next(iter(_SHAPES)))
    _SHAPES[id(spec)] = (spec, shapes)
    return shapes


def _tensor_shapes(spec: ModelSpec) -> list[TensorShape]:
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


def stored_bytes_per_param(spec: ModelSpec, name: str) -> float:
    """Stored bytes per weight of one linear layer, scales included: the one rule inspect's
    estimate and plan's per-GPU split both use. Layers the quantization config ignores, and
    every layer of an unquantized model, keep the model dtype.

    NVFP4: 4 bits + one FP8 scale per 16; MXFP4: 4 bits + one E8M0 scale per 32, routed experts
    only (vLLM's Mxfp4Config quantizes FusedMoE layers; gpt-oss keeps attention in BF16); FP8
    (per tensor, channel or 128x128 block): 1 byte; bitsandbytes: int8 1 byte, NF4/FP4 4 bits +
    an absmax per 64 (4.5 bits); integer group schemes (AWQ, GPTQ, W4A16): bits + one FP16 scale
    and one packed zero point per group. modelopt MIXED_PRECISION: each kind at its own algorithm
    (checkpoint/quant.mixed_precision_algos)."""
    q = spec.quant
    dtype_bytes = 4 if (spec.dtype or "").lower() in ("float32", "float") else 2
    if q is None or _ignored(name, tuple(q.ignore)):
        return dtype_bytes
    method = (q.method or "").lower()
    algo = (q.quant_algo or "").upper()
    if algo == "MIXED_PRECISION":
        from servepilot.checkpoint.quant import mixed_precision_algos

        algo = mixed_precision_algos(q).get("experts" if ".experts." in name else "other", "")
        if not algo:
            return dtype_bytes
    if "NVFP4" in algo or method == "nvfp4":
        return 0.5 + 1 / 16
    if method == "mxfp4":
        return 0.5 + 1 / 32 if ".experts." in name else dtype_bytes
    if method == "bitsandbytes":
        return 1.0 if q.bits == 8 else 0.5 + 1 / 16
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8") or "FP8" in algo or "W8A8" in algo or "INT8" in algo:
        return 1.0
    if q.bits:
        group = q.group_size if q.group_size and q.group_size > 0 else 128
        return q.bits / 8 + (2 + q.bits / 8) / group
    return dtype_bytes


@lru_cache(maxsize=64)
def _ignore_regex(patterns: tuple[str, ...]) -> re.Pattern | None:
    """One regex for a quant config's ignore / exclude_modules list, matched against a module
    name (the tensor name without its last part) or the whole tensor name. Entries are module
    names ("lm_head" also matches "model.lm_head"), globs, or "re:<regex>"; the multimodal
    wrapper prefix "language_model." is dropped (Kimi-K2.5 names its text tower so)."""
    from fnmatch import translate

    parts = []
    for pattern in patterns:
        pattern = str(pattern)
        if pattern.startswith("language_model."):
            pattern = pattern[len("language_model."):]
        if pattern.startswith("re:"):
            parts.append(f"(?:.*?(?:{pattern[3:]}).*)")
        else:
            glob = translate(pattern).removeprefix("(?s:").removesuffix(")\\Z")
            parts.append(f"(?:(?:.*\\.)?(?:{glob}))")
    return re.compile("|".join(parts), re.S) if parts else None


@lru_cache(maxsize=64)
def _ignore_matcher(
    patterns: tuple[str, ...],
) -> tuple[frozenset[str], tuple[str, ...], re.Pattern | None]:
    """_ignore_regex split for speed, with the same answers: plain module names (a set), globs
    whose one wildcard is a trailing "*" (prefixes), and a regex for the rest. A checkpoint's
    ignore list is mostly the first two kinds (Kimi-K2.5: 64 "...layers.N.self_attn*"), and
    one big regex over them costs ~20 ms per `check` to compile and match."""
    names, prefixes, rest = set(), [], []
    for pattern in patterns:
        pattern = str(pattern)
        bare = pattern.removeprefix("language_model.")
        if not bare or pattern.startswith("re:") or bare.startswith("re:"):
            rest.append(pattern)
        elif not any(c in bare for c in "*?["):
            names.add(bare)
        elif bare.endswith("*") and not any(c in bare[:-1] for c in "*?["):
            prefixes.append(bare[:-1])
        else:
            rest.append(pattern)
    return frozenset(names), tuple(prefixes), _ignore_regex(tuple(rest))


def _ignored(name: str, patterns: tuple[str, ...]) -> bool:
    """Whether the module of tensor `name` (or `name` itself) is on the ignore list: an entry
    matches the whole name or a dotted tail of it ("lm_head" matches "model.lm_head")."""
    names, prefixes, rx = _ignore_matcher(tuple(patterns))
    module = name.rsplit(".", 1)[0]
    if names or prefixes:
        start = 0  # each dotted tail of the name (a prefix at a tail of the module is one here too)
        while True:
            if name.startswith(prefixes, start) or name[start:] in names or module[start:] in names:
                return True
            start = name.find(".", start) + 1
            if start == 0:
                break
    return rx is not None and (rx.fullmatch(module) is not None or rx.fullmatch(name) is not None)


def stored_tensors(spec: ModelSpec) -> list[tuple[TensorShape, int]]:
    """Every tensor of the architecture with its stored bytes (norms, embeddings and routers
    in the model dtype, linears by stored_bytes_per_param)."""
    base = DTYPE_BYTES.get((spec.dtype or "bfloat16").lower(), 2)
    out = []
    for t in tensor_shapes(spec):
        per = stored_bytes_per_param(spec, t.name) if t.linear and len(t.shape) >= 2 else base
        out.append((t, int(t.params * per)))
    return out


def estimate_bytes_from_architecture(spec: ModelSpec) -> int | None:
    """Weight bytes from the architecture and the declared quantization (MTP layers included:
    the checkpoint holds them)."""
    if estimate_params(spec) is None:
        return None
    return sum(nbytes for _, nbytes in stored_tensors(spec))


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
