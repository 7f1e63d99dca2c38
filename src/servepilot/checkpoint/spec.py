"""The normalized model spec every later layer reads (checks, planning, overlay).

Everything here is read from headers and JSON only. Fields are None when the checkpoint
does not say; `ModelSpec.unknown` lists what could not be determined, so nothing is guessed
silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AttentionSpec:
    """Attention geometry of the text tower."""

    kind: str  # "mha" | "gqa" | "mqa" | "mla" | "hybrid"
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int  # per-head dim of q/k (for MLA: qk_nope + qk_rope)
    v_head_dim: int | None = None
    # MLA (DeepSeek-V2/V3, Kimi-K2): the KV cache holds one latent of kv_lora_rank + qk_rope_head_dim
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    # sparse MLA (DeepSeek-V3.2 `index_topk`): needs a *_SPARSE backend
    sparse: bool = False
    index_topk: int | None = None
    # sliding-window layers (gpt-oss, Gemma, Mistral): per-layer "full" / "sliding"
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    num_sliding_layers: int = 0
    num_full_layers: int = 0

    @property
    def mla_head_size(self) -> int | None:
        """The head size vLLM's MLA backends see: kv_lora_rank + qk_rope_head_dim (576 for V3)."""
        if self.kv_lora_rank is None or self.qk_rope_head_dim is None:
            return None
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class StateSpec:
    """The recurrent state of a linear-attention or SSM layer (no KV cache: a fixed state per
    sequence). kind: "mamba1" (Jamba), "mamba2" (Nemotron-H, Granite 4, Falcon-H1), "gdn"
    (gated delta net: Qwen3-Next, Qwen3.5), "lightning" (MiniMax-Text-01 linear attention)."""

    kind: str
    num_heads: int = 0  # mamba2 heads; gdn value heads; lightning heads
    head_dim: int = 0  # mamba2 head dim; gdn value head dim; lightning head dim
    num_k_heads: int = 0  # gdn key heads
    k_head_dim: int = 0  # gdn key head dim
    state_size: int = 0  # mamba d_state
    n_groups: int = 1  # mamba2 B/C groups
    conv_kernel: int = 4
    intermediate: int = (
        0  # mamba inner size (heads x head_dim for mamba2, expand x hidden for mamba1)
    )
    dt_rank: int = 0  # mamba1 dt projection rank


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer: its token mixer and its MLP, as the engine builds it.

    mixer: "full" | "sliding" (window) | "chunked" (local attention in chunks of `window`) |
    "linear" (state: gdn / lightning) | "mamba" (state: mamba1 / mamba2) | "linear_proj" (NAS
    block whose attention is replaced by one hidden x hidden linear) | "none" (no mixer).
    A "full" layer with a `state` runs attention and a Mamba mixer side by side (Falcon-H1).
    mlp: "dense" | "moe" | "linear_proj" | "none".
    """

    mixer: str
    window: int | None = None
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    q_gate: bool = False  # q_proj also yields an output gate (Qwen3-Next gated attention)
    state: StateSpec | None = None
    mlp: str = "dense"
    mlp_intermediate: int = 0  # dense MLP width of this layer
    gated_mlp: bool = True  # gate/up/down (3 matrices) or up/down (2: relu2 MLPs)
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_intermediate: int = 0  # all shared experts of this layer together
    latent: int = 0  # latent MoE: routed experts work in this width (Nemotron-3 Super)

    @property
    def has_kv(self) -> bool:
        return self.mixer in ("full", "sliding", "chunked")

    @property
    def kind(self) -> str:
        """The layer's word in listings: its mixer, "+moe" for a routed MLP."""
        mixer = self.mixer + ("+mamba" if self.state is not None and self.has_kv else "")
        return mixer + ("+moe" if self.mlp == "moe" else "")


@dataclass(frozen=True)
class MoESpec:
    num_experts: int  # routed experts
    experts_per_token: int
    num_shared_experts: int = 0
    first_dense_layers: int = 0  # first_k_dense_replace
    expert_intermediate_size: int | None = None
    moe_layer_freq: int = 1


@dataclass(frozen=True)
class QuantDeclaration:
    """One place a checkpoint declares quantization (there can be several)."""

    where: str  # "config.json", "config.json:text_config", "hf_quant_config.json"
    method: str  # normalized: see QuantSpec.method
    raw: dict = field(default_factory=dict, metadata={"json": False})
    quant_algo: str | None = None  # added for inspect: each declaration's own algorithm
    kv_cache: KVCacheDeclaration | None = None  # added for inspect: this declaration's KV cache dtype


@dataclass(frozen=True)
class QuantSpec:
    """The quantization an engine will read.

    method: "modelopt" (quant_algo NVFP4 / FP8 / MIXED_PRECISION), "compressed-tensors",
    "fp8" (incl. block fp8 when weight_block_size is set), "mxfp4", "awq", "gptq",
    "bitsandbytes", "gguf", or the raw quant_method string for anything else.
    """

    method: str
    quant_algo: str | None = None  # modelopt: "NVFP4" | "FP8"; compressed-tensors: derived scheme
    bits: int | None = None
    group_size: int | None = None
    weight_block_size: tuple[int, ...] | None = None
    ignore: tuple[str, ...] = ()
    declared_in: str = "config.json"  # the declaration the engine reads
    declarations: tuple[QuantDeclaration, ...] = ()  # every declaration found
    producer: str | None = None  # e.g. "modelopt 0.41.0"
    raw: dict = field(default_factory=dict, metadata={"json": False})


@dataclass(frozen=True)
class KVCacheDeclaration:
    """A KV cache dtype the checkpoint asks for (modelopt kv_cache_scheme / kv_cache_quant_algo,
    compressed-tensors kv_cache_scheme)."""

    dtype: str  # as vLLM would resolve it: "fp8_e4m3", "fp8", "nvfp4", ...
    where: str  # "config.json:quantization_config.kv_cache_scheme", ...
    raw: object = None


@dataclass(frozen=True)
class CodeFile:
    name: str
    present: bool
    sha256: str | None = None


@dataclass(frozen=True)
class CustomCode:
    """`auto_map` entries: Python files that run with --trust-remote-code."""

    auto_map: dict
    files: tuple[CodeFile, ...] = ()


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # safetensors dtype ("BF16", "F8_E4M3", "U8", ...) or GGUF type name
    shape: tuple[int, ...]
    nbytes: int
    shard: str = ""


@dataclass(frozen=True)
class WeightsInfo:
    """What the weights weigh: exact from headers, else the index total, else an estimate."""

    source: str  # "safetensors" | "index" | "gguf" | "estimate"
    total_bytes: int | None
    shards: int = 0
    params_by_dtype: dict = field(default_factory=dict)  # {"BF16": 123, ...}
    total_params: int | None = None
    estimated: bool = False
    damaged: tuple[str, ...] = ()  # "model-00003.safetensors: header length ... past end of file"
    index_total_bytes: int | None = None  # added for inspect: the index's metadata.total_size, if any
    tensors: tuple[TensorInfo, ...] = field(default=(), metadata={"json": False})


@dataclass(frozen=True)
class GGUFInfo:
    architecture: str | None
    file_size: int
    tensor_types: dict  # {"Q4_K": 123, ...} count of tensors per type
    context_length: int | None = None
    block_count: int | None = None
    head_count: int | None = None
    head_count_kv: int | None = None
    embedding_length: int | None = None
    split_files: tuple[str, ...] = ()
    file_type: str | None = None
    tokenizer_model: str | None = None  # tokenizer.ggml.model: "gpt2" (BPE), "llama" (SPM), ...
    tokenizer_pre: str | None = None  # tokenizer.ggml.pre: the BPE pre-tokenizer's name


@dataclass(frozen=True)
class ModelSpec:
    """A checkpoint, as servepilot understands it."""

    path: str
    format: str  # "hf" (directory with config.json) | "safetensors" | "gguf"
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    text_model_type: str | None = None  # model_type of text_config when nested
    family: str | None = None  # servepilot's name for the family: "deepseek_v3", "llama", ...
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    max_position_embeddings: int | None = None
    dtype: str | None = None  # torch_dtype / dtype of the config: "bfloat16", ...
    tie_word_embeddings: bool = False
    attention: AttentionSpec | None = None
    moe: MoESpec | None = None
    mtp_layers: int = 0  # num_nextn_predict_layers
    layers: tuple[LayerSpec, ...] = ()  # every decoder layer, in order (MTP layers not included)
    quant: QuantSpec | None = None
    kv_cache: KVCacheDeclaration | None = None
    custom_code: CustomCode | None = None
    weights: WeightsInfo | None = None
    gguf: GGUFInfo | None = None
    unknown: tuple[str, ...] = ()  # what could not be determined, in words
    problems: tuple[str, ...] = ()  # damage found while reading (the rest still reported)
    notes: tuple[str, ...] = ()  # added for inspect: observations, e.g. declarations that disagree
    config: dict = field(default_factory=dict, metadata={"json": False})  # raw config.json
    text_config: dict = field(default_factory=dict, metadata={"json": False})

    @property
    def is_mla(self) -> bool:
        return self.attention is not None and self.attention.kind == "mla"

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and self.moe.num_experts > 0

    @property
    def name(self) -> str:
        from pathlib import Path

        return Path(self.path).name
