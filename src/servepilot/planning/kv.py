"""KV cache geometry and capacity, with vLLM's own formulas.

Sources (vllm-project/vllm): `vllm/v1/kv_cache_interface.py` (page sizes, per-request
usage), `vllm/v1/core/kv_cache_utils.py` (groups, blocks, reported tokens, concurrency,
the "estimated maximum model length"), `vllm/config/model.py` (KV heads per TP rank),
all @v0.16.0; V0 sizing from `vllm/worker/cache_engine.py` (one block spans every layer).

Model of hybrid (sliding + full) models, as vLLM v1 builds it: layers are grouped by type
in order of first appearance; the group size is the smallest type's layer count (or the
largest when they differ by < 25 %); each type is cut into ceil(n / group_size) groups
(padding the last). All groups share one page size, so blocks = available // page //
group_size, and the reported "GPU KV cache size" is blocks // number_of_groups ×
block_size: the same figure as if every layer were full attention (plus padding). Sliding
layers pay off in concurrency: a request holds only cdiv(min(window - 1 + batched tokens,
max_model_len), block) + 1 blocks of each sliding group. V0 and
--disable-hybrid-kv-cache-manager treat every layer as full attention.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.checkpoint.spec import ModelSpec
from servepilot.errors import BadInput

# Bytes per KV element for each --kv-cache-dtype value ("auto" follows the model dtype).
# vllm/utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE@v0.16.0: fp8* are stored as uint8.
_DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float": 4,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "int8": 1,
    "uint8": 1,
    # llama.cpp --cache-type-k/v: block formats (q8_0: 34 bytes per 32 values; q4_0: 18 per 32)
    "f16": 2,
    "q8_0": 1.0625,
    "q4_0": 0.5625,
}
FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER = 656  # vllm/v1/kv_cache_interface.py@v0.16.0


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def model_dtype_name(spec: ModelSpec, override: str | None = None) -> str:
    """The dtype vLLM runs the model in: --dtype, else the config's, with float32 cast down.

    vLLM's "auto" dtype turns a float32 checkpoint into bfloat16 (fp16 on GPUs without bf16);
    the planner assumes bfloat16 there.
    """
    name = str(override or "auto").lower().removeprefix("torch.")
    name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32"}.get(name, name)
    if name in ("auto", ""):
        name = (spec.dtype or "bfloat16").lower()
        if name in ("float32", "float"):
            name = "bfloat16"
    return name


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str = "bfloat16") -> float:
    """Bytes per stored element for a KV cache dtype; BadInput for a dtype the planner lacks."""
    name = (kv_cache_dtype or "auto").lower()
    if name == "auto":
        name = model_dtype
    if name in _DTYPE_BYTES:
        return _DTYPE_BYTES[name]
    raise BadInput(f"KV cache dtype {kv_cache_dtype!r}: the planner does not know its bytes per element")


def kv_heads_per_gpu(spec: ModelSpec, tp: int) -> int:
    """vLLM ModelConfig.get_num_kv_heads: 1 for MLA, else max(1, kv_heads // tp)."""
    att = _attention(spec)
    if att.kind == "mla":
        return 1
    return max(1, att.num_kv_heads // max(1, tp))


MLA_LAYOUTS = ("latent", "latent_aligned", "mha_qk_head", "mha_padded_256")


def kv_bytes_per_token_per_layer(spec: ModelSpec, tp: int = 1, kv_cache_dtype: str = "auto",
                                 model_dtype: str | None = None, mla_layout: str = "latent") -> int:
    """KV bytes one GPU stores for one token in one attention layer.

    MLA: one latent of kv_lora_rank + qk_rope_head_dim, not divided by TP (fp8_ds_mla: 656 B);
    `mla_layout` (the `mla_kv_cache` fact) says how the release lays it out: "latent_aligned"
    rounds the latent up to 256 bytes (V0 0.7.x), "mha_qk_head" / "mha_padded_256" are the
    pre-MLA caches: K and V of num_key_value_heads // tp heads of qk_nope + qk_rope (192) or of
    256 (0.4 - 0.6 pad the head for FlashAttention).
    Others: 2 (K and V) × max(1, kv_heads // tp) × head_dim × dtype bytes (head_dim + v_head_dim
    when they differ, as FullAttentionSpec sums head_size and head_size_v).
    """
    att = _attention(spec)
    dtype = (kv_cache_dtype or "auto").lower()
    mdtype = model_dtype or model_dtype_name(spec)
    if att.kind == "mla":
        if mla_layout not in MLA_LAYOUTS:
            raise BadInput(f"MLA KV cache layout {mla_layout!r}: expected one of {', '.join(MLA_LAYOUTS)}")
        if mla_layout.startswith("mha"):
            head = 256 if mla_layout == "mha_padded_256" else (att.qk_nope_head_dim or 0) + (att.qk_rope_head_dim or 0)
            if head <= 0:
                raise BadInput(f"{spec.path}: MLA model without qk_nope_head_dim / qk_rope_head_dim in its config")
            return 2 * max(1, att.num_kv_heads // max(1, tp)) * head * kv_dtype_bytes(dtype, mdtype)
        if dtype == "fp8_ds_mla":
            return FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER
        head = att.mla_head_size
        if head is None:
            raise BadInput(f"{spec.path}: MLA model without kv_lora_rank / qk_rope_head_dim in its config")
        size = head * kv_dtype_bytes(dtype, mdtype)
        if mla_layout == "latent_aligned":
            size = cdiv(size, 256) * 256  # vllm/utils.py@v0.7.3 align_to_256bytes
        return size
    if dtype == "fp8_ds_mla":
        raise BadInput("KV cache dtype fp8_ds_mla is only for MLA models")
    v_dim = att.v_head_dim or att.head_dim
    return kv_heads_per_gpu(spec, tp) * (att.head_dim + v_dim) * kv_dtype_bytes(dtype, mdtype)


def kv_bytes_per_token(
    spec: ModelSpec,
    tp: int = 1,
    kv_cache_dtype: str = "auto",
    pp: int = 1,
    model_dtype: str | None = None,
    mla_layout: str = "latent",
) -> int:
    """KV bytes per token on one GPU over the attention layers of the largest PP stage: the one
    formula check's remedies, plan and inspect read. Every attention layer counts, sliding and
    chunked ones too: vLLM's "GPU KV cache size" sizes each as full (see the module
    docstring); Mamba / linear-attention layers hold a state per sequence instead
    (`state_bytes_per_sequence`), and no-op layers nothing.
    """
    per_layer = layer_kv_bytes(spec, tp, kv_cache_dtype, model_dtype, mla_layout)
    total = 0.0
    for rng in pp_layer_ranges(len(per_layer), pp):
        total = max(total, sum(per_layer[i] for i in rng))
    return int(total)


def layer_kv_bytes(
    spec: ModelSpec,
    tp: int = 1,
    kv_cache_dtype: str = "auto",
    model_dtype: str | None = None,
    mla_layout: str = "latent",
) -> list[float]:
    """KV bytes per token per GPU of every decoder layer (0 for layers without a KV cache)."""
    from dataclasses import replace

    from servepilot.checkpoint.estimate import model_layers

    att = _attention(spec)
    out: list[float] = []
    for layer in model_layers(spec):
        if not layer.has_kv:
            out.append(0)
        elif att.kind == "mla" or (
            layer.num_kv_heads == att.num_kv_heads
            and layer.head_dim == att.head_dim
            and (layer.v_head_dim or layer.head_dim) == (att.v_head_dim or att.head_dim)
        ):
            out.append(
                kv_bytes_per_token_per_layer(spec, tp, kv_cache_dtype, model_dtype, mla_layout)
            )
        else:  # a layer with its own geometry (NAS blocks, MiMo's sliding layers)
            own = replace(
                att,
                num_kv_heads=layer.num_kv_heads,
                head_dim=layer.head_dim,
                v_head_dim=layer.v_head_dim or layer.head_dim,
            )
            out.append(
                kv_bytes_per_token_per_layer(
                    replace(spec, attention=own), tp, kv_cache_dtype, model_dtype
                )
            )
    return out


def layer_types(spec: ModelSpec) -> tuple[str, ...]:
    """The KV cache manager's kind of every layer that holds memory per request: "full",
    "sliding" (sliding window), "chunked" (Llama-4 local attention) or "mamba" (Mamba and linear
    attention: one state per sequence). Layers with neither (NAS no-ops, Nemotron-H MLP/MoE
    blocks) are left out, as are MTP / next-n layers (no KV cache without speculative decoding)."""
    from servepilot.checkpoint.estimate import model_layers

    window = sliding_window(spec)
    out = []
    for layer in model_layers(spec):
        if layer.has_kv:
            out.append(layer.mixer if layer.mixer in ("sliding", "chunked") and window else "full")
        elif layer.state is not None:
            out.append("mamba")
    return tuple(out)


def sliding_window(spec: ModelSpec) -> int | None:
    att = _attention(spec)
    cfg = spec.text_config or spec.config or {}
    if cfg.get("use_sliding_window") is False:  # Qwen2: the window is declared but off
        return None
    return att.sliding_window or None


def state_bytes_per_layer(
    layer, tp: int = 1, model_dtype: str = "bfloat16", ssm_dtype: str | None = None
) -> int:
    """Bytes of one sequence's state in one Mamba / linear-attention layer on one GPU, as vLLM
    allocates it (vllm/model_executor/layers/mamba/mamba_utils.py@v0.18.0
    MambaStateShapeCalculator, same shapes @v0.16.0): conv state + temporal (SSM) state.
    The conv state is kept in the model dtype; the SSM state in `ssm_dtype` (NemotronH: the
    config's mamba_ssm_cache_dtype) else the model dtype."""
    st = layer.state
    if st is None:
        return 0
    tp = max(1, tp)
    conv_b = _DTYPE_BYTES.get(model_dtype, 2)
    ssm_b = _DTYPE_BYTES.get(ssm_dtype or model_dtype, conv_b)
    if st.kind == "mamba2":
        groups = st.n_groups + (
            0 if st.n_groups % tp == 0 else tp - st.n_groups
        )  # extra_groups_for_head_shards
        conv = (st.conv_kernel - 1) * (st.intermediate + 2 * groups * st.state_size) // tp
        temporal = st.num_heads // tp * st.head_dim * st.state_size
    elif st.kind == "mamba1":
        conv = st.intermediate // tp * (st.conv_kernel - 1)
        temporal = st.intermediate // tp * st.state_size
    elif st.kind == "gdn":
        conv = (
            (2 * st.num_k_heads * st.k_head_dim + st.num_heads * st.head_dim)
            // tp
            * (st.conv_kernel - 1)
        )
        temporal = st.num_heads // tp * st.head_dim * st.k_head_dim
    elif st.kind == "lightning":
        # linear_attention_state_shape: (heads / tp, head_dim, head_dim) in the model dtype
        # (linear_attention_state_dtype: mamba_cache_dtype "auto"; float32 is refused)
        return int(st.num_heads // tp * st.head_dim * st.head_dim * conv_b)
    else:
        return 0
    return int(conv * conv_b + temporal * ssm_b)


def state_bytes_per_sequence(spec: ModelSpec, tp: int = 1, model_dtype: str | None = None,
                             ssm_dtype: str | None = None) -> int:
    """One sequence's Mamba / linear-attention state on one GPU over all such layers."""
    from servepilot.checkpoint.estimate import model_layers

    mdtype = model_dtype or model_dtype_name(spec)
    ssm = ssm_dtype or ssm_cache_dtype(spec)
    return sum(state_bytes_per_layer(ly, tp, mdtype, ssm) for ly in model_layers(spec))


def ssm_cache_dtype(spec: ModelSpec) -> str | None:
    """The SSM state dtype when it is not the model dtype: NemotronH takes the config's
    mamba_ssm_cache_dtype, else float16 (model_executor/models/config.py@v0.18.0)."""
    if not (spec.text_model_type or spec.model_type or "").startswith("nemotron_h"):
        return None
    cfg = spec.text_config or spec.config or {}
    value = cfg.get("mamba_ssm_cache_dtype")
    return value if isinstance(value, str) and value in _DTYPE_BYTES else "float16"


def hybrid_block_size(
    block_size: int, attn_bytes_per_token: int, state_page_bytes: int, mla: bool = False
) -> int:
    """vLLM's page-size unification for attention + Mamba models: the attention block grows to
    a multiple of the kernel alignment (16; 64 for MLA) until one attention page holds at
    least one Mamba state page (model_executor/models/config.py@v0.18.0
    HybridAttentionMambaModelConfig, mamba_cache_mode "none"); the Mamba page is then padded
    to the attention page."""
    if state_page_bytes <= 0 or attn_bytes_per_token <= 0:
        return block_size
    align = 64 if mla else 16
    needed = align * cdiv(state_page_bytes, align * attn_bytes_per_token)
    return max(block_size, needed)


def pp_layer_ranges(num_layers: int, pp: int,
                    partition: tuple[int, ...] | None = None) -> list[range]:
    """vllm/distributed/utils.py get_pp_indices: even split, the remainder to the later ranks
    except the last (partitions[-2], [-3], ... get one more layer); `partition`: the layers
    per stage VLLM_PP_LAYER_PARTITION names (see pp_partition)."""
    pp = max(1, pp)
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    if partition and len(partition) == pp and sum(partition) == num_layers:
        parts = list(partition)
    out, start = [], 0
    for p in parts:
        out.append(range(start, start + p))
        start += p
    return out


def pp_partition(value, num_layers: int, pp: int) -> tuple[int, ...] | None:
    """VLLM_PP_LAYER_PARTITION ("16,32"): layers per pipeline stage. vLLM refuses a list that
    is not pp whole numbers adding up to num_hidden_layers (get_pp_indices@v0.14.1)."""
    if value is None or pp <= 1:
        return None
    try:
        parts = tuple(int(x) for x in str(value).split(","))
    except ValueError:
        parts = ()
    if len(parts) != pp or sum(parts) != num_layers or min(parts) < 0:
        raise BadInput(f"VLLM_PP_LAYER_PARTITION={value} does not split {num_layers} layers "
                       f"into {pp} pipeline stages: vLLM refuses it before loading")
    return parts


def kv_groups(types: tuple[str, ...], hybrid: bool, within_25pct: bool = True) -> list[tuple[str, list[int]]]:
    """vLLM v1 KV cache groups: (type, layer indices) per group (see the module docstring).

    within_25pct: the 0.12+ rule that uses the largest type's count as the group size when
    the counts differ by less than 25 % (before 0.12 always the smallest).
    """
    if not types:
        return []
    if not hybrid or len(set(types)) == 1:
        kind = types[0] if len(set(types)) == 1 else "full"
        return [(kind, list(range(len(types))))]
    by_type: dict[str, list[int]] = {}
    for i, t in enumerate(types):
        by_type.setdefault(t, []).append(i)
    counts = [len(v) for v in by_type.values()]
    group_size = min(counts)
    if within_25pct and max(counts) < min(counts) * 1.25:
        group_size = max(counts)
    groups = []
    for kind, layers in by_type.items():
        n_groups = cdiv(len(layers), group_size)
        for i in range(n_groups):
            groups.append((kind, layers[i::n_groups]))
    return groups


@dataclass(frozen=True)
class KVCapacity:
    """What the engine will report about its KV cache."""

    page_size_bytes: int  # one block of one layer
    block_size: int
    num_blocks: int
    kv_tokens: int  # "GPU KV cache size: N tokens"
    max_concurrency: float  # "Maximum concurrency for max_model_len tokens per request"
    needed_bytes: int  # KV memory one max_model_len request needs on the tightest GPU
    fits: bool  # at least one max_model_len request fits
    max_model_len_fit: int | None  # the engine's own suggestion when it does not fit
    longest_context: int  # the longest single request that fits (up to search_limit)
    groups: int  # KV cache groups (1 unless hybrid)


def capacity(
    *,
    types: tuple[str, ...],
    window: int | None,
    bytes_per_token_per_layer: int,
    available_per_stage: list[int],
    block_size: int,
    max_model_len: int,
    generation: str,
    hybrid: bool,
    max_num_batched_tokens: int,
    search_limit: int | None = None,
    num_gpu_blocks_override: int | None = None,
    group_within_25pct: bool = True,
    tokens_from_concurrency: bool = False,
    whole_model_check: bool = False,
    stages: list[range] | None = None,
) -> KVCapacity:
    """Blocks, tokens, concurrency and fit, as vLLM computes them (V0 or V1 rules).

    `available_per_stage`: KV bytes available on one GPU of each pipeline stage (TP ranks of
    a stage are alike). The engine takes the smallest block count over all workers.
    `tokens_from_concurrency`: the release reports "GPU KV cache size" as
    int(max_concurrency × max_model_len) instead of blocks // groups × block_size.
    `whole_model_check`: the release checks one max_model_len request of every layer of the
    model against the smallest worker's budget (pp_max_model_len_check), not each worker's
    own layers against its own budget. `stages`: the layers of each pipeline stage, when
    they are not get_pp_indices' even split (VLLM_PP_LAYER_PARTITION).
    """
    page = block_size * bytes_per_token_per_layer
    if page <= 0:
        from servepilot.errors import BadInput

        raise BadInput("the KV cache per token is 0 bytes: the attention geometry (head size) is unknown")
    use_hybrid = (hybrid or "mamba" in types) and generation == "v1"  # Mamba layers need it
    groups = kv_groups(types, use_hybrid, group_within_25pct)
    stages = stages or pp_layer_ranges(len(types), len(available_per_stage))
    blocks_per_stage = []
    for rng, avail in zip(stages, available_per_stage, strict=True):
        group_size = max((sum(1 for i in layers if i in rng) for _, layers in groups), default=1)
        blocks_per_stage.append(max(0, int(max(0, avail) // page // max(1, group_size))))
    num_blocks = min(blocks_per_stage) if blocks_per_stage else 0
    if num_gpu_blocks_override:
        num_blocks = int(num_gpu_blocks_override)
    n_groups = max(1, len(groups))
    kv_tokens = num_blocks // n_groups * block_size

    def per_layer_usage(kind: str, length: int) -> int:
        if (
            kind == "mamba"
        ):  # one state page per sequence (MambaSpec.max_memory_usage_bytes, mode "none")
            return page
        if kind == "sliding" and window and use_hybrid:
            tokens = min(window - 1 + max_num_batched_tokens, length)
            return (cdiv(tokens, block_size) + 1) * page
        if kind == "chunked" and window and use_hybrid:
            # ChunkedLocalAttentionSpec.max_memory_usage_bytes@v0.18.0: the chunk plus the
            # batched tokens, at most max_model_len
            return cdiv(min(window + max_num_batched_tokens, length), block_size) * page
        return cdiv(length, block_size) * page

    def needed(length: int, rng: range) -> int:
        return sum(per_layer_usage(types[i] if use_hybrid else "full", length) for i in rng)

    # Concurrency: blocks one max_model_len request holds, summed over groups.
    if generation == "v0":
        max_concurrency = num_blocks * block_size / max_model_len if max_model_len else 0.0
    else:
        blocks_per_request = sum(per_layer_usage(kind, max_model_len) // page for kind, _ in groups) or 1
        max_concurrency = num_blocks / blocks_per_request

    if tokens_from_concurrency and generation != "v0":
        kv_tokens = int(max_concurrency * max_model_len)

    # Fit: V0 compares max_model_len with blocks x block_size; V1 compares the KV bytes one
    # request needs with the available bytes (per worker) and binary-searches a length.
    tight = min(range(len(stages)), key=lambda s: available_per_stage[s]) if stages else 0
    limit = max(max_model_len, search_limit or 0)
    if generation == "v0":
        cap = num_blocks * block_size
        fits = cap >= max_model_len
        suggestion = None if fits else cap
        longest = min(cap, limit)
        need = cdiv(max_model_len, block_size) * page * len(stages[tight]) if stages else 0
    else:
        if whole_model_check and len(stages) > 1:
            # every layer's need against the smallest worker budget (kv_cache_utils
            # get_kv_cache_configs@v0.14.1 and @v0.16.0: _check_enough_kv_cache_memory(min(...)))
            stages = [range(0, len(types))]
            available_per_stage = [min(available_per_stage)]
        need = max((needed(max_model_len, rng) for rng in stages), default=0)
        fits = all(needed(max_model_len, rng) <= avail for rng, avail in zip(stages, available_per_stage, strict=True))
        fits = fits and min(available_per_stage, default=0) > 0

        def longest_fitting(upper: int) -> int:
            return min(
                (_search(lambda n, r=rng, a=avail: needed(n,
                                                          r) <= a,
                         upper) for rng, avail in zip(stages, available_per_stage, strict=True)),
                default=0,
            )

        suggestion = None if fits else longest_fitting(max_model_len)
        longest = longest_fitting(limit)
    return KVCapacity(
        page_size_bytes=page,
        block_size=block_size,
        num_blocks=num_blocks,
        kv_tokens=kv_tokens,
        max_concurrency=max_concurrency,
        needed_bytes=need,
        fits=fits,
        max_model_len_fit=suggestion,
        longest_context=longest,
        groups=n_groups,
    )


def _search(fits, upper: int) -> int:
    """kv_cache_utils.estimate_max_model_len: the largest n in [1, upper] with fits(n), or 0."""
    if upper < 1 or not fits(1):
        return 0
    lo, hi, best = 1, upper, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def _attention(spec: ModelSpec):
    if spec.attention is None:
        raise BadInput(f"{spec.path}: the attention geometry is unknown (no layers / heads in the config)")
    return spec.attention
