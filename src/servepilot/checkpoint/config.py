"""config.json → architecture: attention geometry, MoE, MTP, sizes.

Keys are read the way Hugging Face transformers and vLLM read them; where several names
exist for one thing (num_experts / n_routed_experts / num_local_experts) each is listed
with the families that use it. A value of the wrong type is never coerced: it is reported
in `notes` and treated as absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servepilot.checkpoint.families import Family, find_family
from servepilot.checkpoint.layers import LayerReader, check_count
from servepilot.checkpoint.spec import AttentionSpec, LayerSpec, MoESpec

# Geometry keys whose value must be a sane count: anything else is bad input (exit 2), never a
# note, since every figure servepilot derives rests on them. key -> (minimum, LIMITS word).
GEOMETRY_KEYS = {
    "num_hidden_layers": (1, "layers"),
    "n_layer": (1, "layers"),
    "num_layers": (1, "layers"),
    "num_attention_heads": (1, "heads"),
    "n_head": (1, "heads"),
    "num_key_value_heads": (1, "heads"),
    "num_kv_heads": (1, "heads"),
    "head_dim": (1, "width"),
    "hidden_size": (1, "width"),
    "intermediate_size": (1, "width"),
    "moe_intermediate_size": (1, "width"),
    "vocab_size": (1, "vocab"),
    "n_routed_experts": (0, "experts"),
    "num_experts": (0, "experts"),
    "num_local_experts": (0, "experts"),
    "moe_num_experts": (0, "experts"),
    "num_experts_per_tok": (0, "experts"),
    "num_experts_per_token": (0, "experts"),
    "top_k_experts": (0, "experts"),
    "n_shared_experts": (0, "experts"),
    "kv_lora_rank": (1, "width"),
    "q_lora_rank": (1, "width"),
    "qk_rope_head_dim": (0, "width"),
    "qk_nope_head_dim": (0, "width"),
    "v_head_dim": (1, "width"),
    "num_nextn_predict_layers": (0, "layers"),
}

# Families whose config class ties the output embedding to the input one unless config.json
# says otherwise (tie_word_embeddings=True in transformers 4.57.1 configuration_gemma*.py,
# configuration_cohere.py, configuration_ernie4_5*.py; starcoder2 keeps PretrainedConfig's True).
# Configs whose MLP width defaults to 4 x the hidden size when n_inner is null (the early
# remote-code Phi configs, model_type phi-msft).
INNER_IS_4X_HIDDEN = ("phi-msft",)

TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3", "gemma3_text", "cohere", "starcoder2", "ernie4_5",
                   "ernie4_5_moe")

# layer_types values (transformers configuration_*.py) → the spec's two words.
LAYER_TYPE_WORDS = {
    "sliding_attention": "sliding",
    "full_attention": "full",
    "sliding": "sliding",
    "full": "full",
    "chunked_attention": "sliding",  # Llama-4 local chunks behave as windows for the KV cache
}

# Hostile-input ceilings (issue 17): the planner builds per-layer tables, so a layer count of
# 10**400 would loop forever. The deepest published decoders have a few hundred layers;
# sizes (hidden, vocab, positions) stay below 2**53, the largest integer a JSON reader that
# uses doubles (the engines' own) keeps exact.
LAYER_CEILING = 10_000
SIZE_CEILING = 2**53
# Class and type names are identifiers of a few dozen characters; a config that lists more
# than a handful, or names thousands of characters long, is damaged and must not flood output.
MAX_ARCHITECTURES = 8
NAME_CEILING = 200


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def text_tower(config: dict) -> dict:
    """The text model's config: `text_config` of multimodal wrappers (Kimi-K2.5, Gemma-3), else the config."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


@dataclass
class ArchitectureReading:
    """What config.json says about the model, plus what it could not say (`notes`)."""

    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    text_model_type: str | None = None
    family: Family | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    dtype: str | None = None
    tie_word_embeddings: bool = False
    attention: AttentionSpec | None = None
    moe: MoESpec | None = None
    mtp_layers: int = 0
    layers: tuple[LayerSpec, ...] = ()
    notes: list[str] = field(default_factory=list)


class _Reader:
    """Typed reads from the text tower first, then the outer config, with notes on bad values."""

    def __init__(self, outer: dict, text: dict, notes: list[str]):
        self.outer, self.text, self.notes = outer, text, notes
        self.nested = text is not outer
        self.rejected: set[str] = set()  # keys present with an unusable value (already noted)

    def _where(self, key: str, in_text: bool) -> str:
        return f"text_config.{key}" if in_text and self.nested else key

    def get_int(self, *keys: str, minimum: int = 0, maximum: int = SIZE_CEILING) -> int | None:
        for key in keys:
            for d, in_text in ((self.text, True), (self.outer, False)):
                if key not in d or d[key] is None:
                    continue
                v = d[key]
                if type(v) is int and minimum <= v <= maximum:
                    return v
                if isinstance(v, float) and v.is_integer() and minimum <= v <= maximum:
                    return int(v)
                if isinstance(v, list):
                    self.notes.append(
                        f"{self._where(key, in_text)} is a per-layer list, which servepilot "
                        "does not model: ignored"
                    )
                    self.rejected.add(keys[0])
                    return None
                shown = _short(v) if not (type(v) is int and v > maximum) else f"an integer of {len(str(v))} digits"
                self.notes.append(f"{self._where(key, in_text)} is {shown}, not an integer in "
                                  f"[{minimum}, {maximum:,}]: ignored")
                self.rejected.add(keys[0])
                return None
        return None

    def get_str(self, *keys: str) -> str | None:
        for key in keys:
            for d in (self.text, self.outer):
                v = d.get(key)
                if isinstance(v, str):
                    return v
        return None

    def raw(self, key: str):
        if key in self.text:
            return self.text[key]
        return self.outer.get(key)


def validate_geometry(config: dict) -> None:
    """ConfigValueError for a geometry count no model can have: a string ("sixty"), a bool,
    NaN, a fraction, zero or negative heads, layers or experts beyond any real model."""
    text = text_tower(config)
    places = [(config, "")] + ([(text, "text_config.")] if text is not config else [])
    for d, prefix in places:
        for key, (minimum, limit) in GEOMETRY_KEYS.items():
            value = d.get(key)
            if value is None:
                continue
            # A per-layer list (Hunyuan-A13B's moe_intermediate_size) is a real shape: each
            # entry must be sane, and the reader then notes the list as not modelled.
            for i, item in enumerate(value if isinstance(value, list) else [value]):
                where = f"{prefix}{key}[{i}]" if isinstance(value, list) else prefix + key
                check_count(where, item, minimum=minimum, limit=limit)


def read_architecture(config: dict) -> ArchitectureReading:
    """Read a config.json dict (outer, with its text_config when nested).

    Raises ConfigValueError (bad input) for geometry values no model can have.
    """
    validate_geometry(config)
    text = text_tower(config)
    out = ArchitectureReading()
    r = _Reader(config, text, out.notes)

    archs = config.get("architectures")
    if isinstance(archs, list):
        names = tuple(dict.fromkeys(a for a in archs if isinstance(a, str) and len(a) <= NAME_CEILING))
        out.architectures = names[:MAX_ARCHITECTURES]
        if len(names) > MAX_ARCHITECTURES or len(names) < len(archs):
            out.notes.append(f"architectures lists {len(archs):,} entries; kept the first "
                             f"{len(out.architectures)} distinct class names")
    elif archs is not None:
        out.notes.append(f"architectures is {_short(archs)}, not a list of class names: ignored")
    model_type = config.get("model_type")
    out.model_type = model_type if isinstance(model_type, str) and len(model_type) <= NAME_CEILING else None
    if isinstance(model_type, str) and out.model_type is None:
        out.notes.append(f"model_type is a string of {len(model_type):,} characters: ignored")
    if text is not config:
        tm = text.get("model_type")
        out.text_model_type = tm if isinstance(tm, str) else None
    text_archs = text.get("architectures") if text is not config else None
    text_archs = tuple(a for a in text_archs if isinstance(a, str)) if isinstance(text_archs, list) else ()

    outer_family = find_family(out.model_type, out.architectures)
    family = None
    if text is not config:
        family = find_family(out.text_model_type, text_archs)
    if family is None and outer_family is not None and not outer_family.wrapper:
        family = outer_family
    out.family = family
    if family is None:
        shown = out.text_model_type or out.model_type
        if shown is None:
            out.notes.append("config.json has no model_type: attention geometry read from standard keys only")
        else:
            out.notes.append(
                f"model_type {shown!r} is not a family servepilot knows: attention geometry read from standard keys "
                "only"
            )

    out.hidden_size = r.get_int("hidden_size", "d_model", "n_embd", minimum=1)
    out.intermediate_size = r.get_int("intermediate_size", "ffn_hidden_size", "n_inner", minimum=1)
    if out.intermediate_size is None and out.hidden_size and out.model_type in INNER_IS_4X_HIDDEN:
        # n_inner: null means 4 * n_embd in these configs' MLP (vllm-project/vllm
        # vllm/model_executor/models/phi_1_5.py PhiMLP, v0.2.x, which served phi-msft)
        out.intermediate_size = 4 * out.hidden_size
        out.notes.append(f"n_inner is null: the MLP is 4 x n_embd = {out.intermediate_size} wide")
    out.vocab_size = r.get_int("vocab_size", minimum=1)
    out.max_position_embeddings = r.get_int("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                                            minimum=1)
    out.dtype = r.get_str("torch_dtype", "dtype")
    tie = r.raw("tie_word_embeddings")
    if isinstance(tie, bool):
        out.tie_word_embeddings = tie
    else:  # absent: the config class's default (transformers 4.57.1 configuration_*.py)
        out.tie_word_embeddings = (out.text_model_type or out.model_type or "") in TIED_BY_DEFAULT
    out.mtp_layers = r.get_int("num_nextn_predict_layers", "mtp_num_hidden_layers", maximum=LAYER_CEILING) or 0

    out.attention = _attention(r, family, out)
    out.moe = _moe(r)
    layers = _layers(r, out)
    out.layers = layers
    if out.attention is not None and layers:
        out.attention = _with_layer_counts(out.attention, layers)

    for name, value in (("hidden_size", out.hidden_size), ("vocab_size", out.vocab_size),
                        ("max_position_embeddings", out.max_position_embeddings)):
        if value is None and name not in r.rejected:
            out.notes.append(f"{name}: not in config.json")
    if out.attention is None and not any(n.startswith("head_dim:") for n in out.notes):
        out.notes.append("attention: no usable num_hidden_layers and num_attention_heads in config.json")
    return out


def _declared_layers(r: _Reader) -> int | None:
    """num_hidden_layers, else the length of the per-layer list that stands for it
    (Nemotron-3 Ultra has layers_block_type and no num_hidden_layers)."""
    n = r.get_int("num_hidden_layers", "n_layer", "num_layers", minimum=1, maximum=LAYER_CEILING)
    if n is not None:
        return n
    for key in ("hybrid_override_pattern", "layers_block_type", "block_configs", "layer_types"):
        v = r.raw(key)
        if isinstance(v, list | str) and 0 < len(v) <= LAYER_CEILING:
            return len(v)
    return None


def _layers(r: _Reader, out: ArchitectureReading) -> tuple[LayerSpec, ...]:
    reader = LayerReader(
        r,
        model_type=out.text_model_type or out.model_type or "",
        hidden=out.hidden_size or 0,
        intermediate=out.intermediate_size,
        attention=out.attention,
        moe=out.moe,
    )
    layers = reader.read(out.attention.num_layers if out.attention else _declared_layers(r))
    out.notes.extend(reader.notes + reader.unknown)
    return layers


def _with_layer_counts(att: AttentionSpec, layers: tuple[LayerSpec, ...]) -> AttentionSpec:
    """The attention summary agreeing with the layer list: sliding/full counts and words."""
    from dataclasses import replace

    words = tuple("sliding" if ly.mixer in ("sliding", "chunked") else ly.mixer for ly in layers)
    if all(w == "full" for w in words):
        words = ()  # every layer full attention: no per-layer list, as before
    n_sliding = sum(1 for ly in layers if ly.mixer in ("sliding", "chunked"))
    n_full = sum(1 for ly in layers if ly.mixer == "full")
    window = next((ly.window for ly in layers if ly.window), att.sliding_window)
    kind = att.kind
    if kind != "mla" and n_sliding and n_full:
        kind = "hybrid"
    elif kind == "hybrid" and not (n_sliding and n_full):
        kind = "gqa" if att.num_kv_heads < att.num_heads else "mha"
    return replace(
        att,
        kind=kind,
        num_layers=len(layers),
        layer_types=words,
        num_sliding_layers=n_sliding,
        num_full_layers=n_full,
        sliding_window=window,
    )


def _attention(r: _Reader, family: Family | None, out: ArchitectureReading) -> AttentionSpec | None:
    layers = _declared_layers(r)
    heads = r.get_int("num_attention_heads", "n_head", "num_heads", minimum=1)
    if layers is None or heads is None:
        return None
    kv_heads = r.get_int("num_key_value_heads", "num_kv_heads", "n_head_kv", minimum=1)
    if kv_heads is None:
        mq = r.raw("multi_query")
        # transformers: num_key_value_heads defaults to num_attention_heads (MHA); falcon's
        # multi_query flag means one KV head.
        kv_heads = 1 if mq is True else heads
    head_dim = r.get_int("head_dim", minimum=1)
    if head_dim is None and out.hidden_size:
        # transformers' default when config.json has no head_dim (LlamaAttention and most others)
        head_dim = out.hidden_size // heads or None
        if head_dim is None:
            out.notes.append(f"head_dim: hidden_size {out.hidden_size} / {heads} heads leaves no head size")

    kv_lora = r.get_int("kv_lora_rank", minimum=1)
    mla = kv_lora is not None and family is not None and family.attention == "mla"
    if kv_lora is not None and not mla:
        out.notes.append(
            "kv_lora_rank is set but the family is not one servepilot knows to use MLA: the KV "
            "cache is described by num_key_value_heads x head_dim, as engines do for unknown models"
        )

    kwargs: dict = {}
    if mla:
        rope = r.get_int("qk_rope_head_dim", minimum=0)
        nope = r.get_int("qk_nope_head_dim", minimum=0)
        kwargs.update(
            kv_lora_rank=kv_lora,
            q_lora_rank=r.get_int("q_lora_rank", minimum=1),
            qk_rope_head_dim=rope,
            qk_nope_head_dim=nope,
            v_head_dim=r.get_int("v_head_dim", minimum=1),
        )
        if rope is not None and nope is not None:
            head_dim = rope + nope
        else:
            out.notes.append("MLA model without qk_rope_head_dim and qk_nope_head_dim: head size unknown")
        index_topk = r.get_int("index_topk", minimum=1)
        if index_topk is not None:  # DeepSeek-V3.2 / GLM-5 lightning indexer: sparse MLA
            kwargs.update(sparse=True, index_topk=index_topk)
    else:
        v = r.get_int("v_head_dim", minimum=1)
        if v is not None and v != head_dim:
            kwargs["v_head_dim"] = v

    if head_dim is None and not mla:
        # No head size, no KV size: the geometry is unknown (a 0 would plan a free KV cache).
        out.notes.append("head_dim: neither head_dim nor a usable hidden_size in config.json: attention unknown")
        return None
    if head_dim is None:  # MLA: the KV latent is sized by kv_lora_rank + qk_rope_head_dim instead
        head_dim = 0

    layer_types, window = _layer_types(r, layers)
    n_sliding = sum(1 for t in layer_types if t == "sliding")
    n_full = sum(1 for t in layer_types if t == "full")
    if mla:
        kind = "mla"
    elif n_sliding and n_full:
        kind = "hybrid"
    elif kv_heads == 1 and heads > 1:
        kind = "mqa"
    elif kv_heads < heads:
        kind = "gqa"
    else:
        kind = "mha"
    return AttentionSpec(
        kind=kind,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        sliding_window=window,
        layer_types=layer_types,
        num_sliding_layers=n_sliding,
        num_full_layers=n_full,
        **kwargs,
    )


def _layer_types(r: _Reader, layers: int) -> tuple[tuple[str, ...], int | None]:
    """Per-layer "sliding"/"full" (empty when every layer is full attention) and the window."""
    window = r.get_int("sliding_window", minimum=1)
    raw = r.raw("layer_types")
    if isinstance(raw, list) and raw:
        types = tuple(LAYER_TYPE_WORDS.get(t, str(t)) if isinstance(t, str) else str(t) for t in raw)
        if len(types) != layers:
            r.notes.append(f"layer_types lists {len(types)} layers, num_hidden_layers is {layers}")
        unknown = sorted({t for t in types if t not in ("sliding", "full")})
        if unknown:
            r.notes.append(f"layer_types holds kinds servepilot does not know: {', '.join(unknown)}")
        return types, window
    if window is None:
        return (), None
    if r.raw("use_sliding_window") is False:
        # Qwen2/Qwen3 carry sliding_window but switch it off with use_sliding_window.
        return (), None
    pattern = r.get_int("sliding_window_pattern", minimum=1)
    if pattern:
        # Gemma-3: every pattern-th layer is global, the others local (configuration_gemma3.py).
        return tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)), window
    return ("sliding",) * layers, window


def _moe(r: _Reader) -> MoESpec | None:
    experts = r.get_int(
        "n_routed_experts",  # DeepSeek, Kimi, GLM
        "num_experts",  # Qwen2/3-MoE
        "num_local_experts",  # Mixtral, gpt-oss
        "moe_num_experts",
        minimum=0,
    )
    if not experts:
        return None
    per_token = r.get_int(
        "num_experts_per_tok",
        "num_experts_per_token",
        "top_k_experts",
        "experts_per_token",
        "moe_top_k",
        "moe_k",
        "moe_topk",
        minimum=1,
    )
    if per_token is None:
        r.notes.append("MoE model without num_experts_per_tok: experts per token unknown (0)")
    shared = r.get_int("n_shared_experts", "num_shared_experts", minimum=0)
    if shared is None:
        shared = 1 if (r.get_int("shared_expert_intermediate_size", minimum=0) or 0) > 0 else 0
    expert_inter = r.get_int(
        "moe_intermediate_size", "routed_expert_hidden_size", "expert_intermediate_size", minimum=1
    )
    if expert_inter is None and r.raw("num_local_experts"):
        expert_inter = r.get_int("intermediate_size", minimum=1)  # Mixtral/gpt-oss: experts use intermediate_size
    return MoESpec(
        num_experts=experts,
        experts_per_token=per_token or 0,
        num_shared_experts=shared,
        first_dense_layers=r.get_int("first_k_dense_replace", minimum=0) or 0,
        expert_intermediate_size=expert_inter,
        moe_layer_freq=r.get_int("moe_layer_freq", "decoder_sparse_step", minimum=1) or 1,
    )
