"""Weights per GPU, split the way the engine splits them.

Tensor parallel (vLLM `ColumnParallelLinear` / `RowParallelLinear`): q/k/v/o, gate/up/down,
the MLA q_b/kv_b projections and dense experts are divided by TP; K and V by
min(TP, kv_heads) (a rank holds max(1, kv_heads // tp) heads, replicas when kv_heads < tp);
norms, router gates and the MLA down-projections q_a / kv_a (`ReplicatedLinear` in
vllm/model_executor/models/deepseek_v2.py@v0.16.0) are replicated. Embedding and lm_head are
vocab-parallel: ceil(vocab padded to 64 / tp) rows each. MoE experts: divided by TP inside
each expert, or with --enable-expert-parallel whole experts spread over EP = TP × DP ranks
(ceil(E / EP) per rank, vllm/model_executor/layers/fused_moe/layer.py determine_expert_map).
Pipeline parallel: decoder layers by `get_pp_indices`, embedding on the first stage,
final norm and lm_head on the last. Layers past num_hidden_layers (DeepSeek's MTP layer)
are not loaded without speculative decoding. Unknown names: divided by TP, and listed.

Sources of the tensors, best first: safetensors headers (exact, per tensor, stored dtype:
packed U8 + scales for NVFP4 / MXFP4), the index total split in the proportions of the
architecture, the architecture alone (an estimate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from servepilot.checkpoint.spec import ModelSpec, TensorInfo
from servepilot.planning.kv import cdiv, pp_layer_ranges

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block)\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.")
_SHARED = re.compile(r"shared_expert")
_VOCAB = re.compile(
    r"(embed_tokens|wte|word_embeddings|tok_embeddings|embed_in|lm_head|embed_out)(\.|$)|^output\.weight$"
)
_LM_HEAD = re.compile(r"(lm_head|embed_out)(\.|$)|^output\.weight$")
_NORM = re.compile(r"(norm|ln_\d|ln_f)(\.|_)|(^|\.)(norm|ln_f)\.")
_ROUTER = re.compile(r"(\.mlp\.gate\.|\.router\.|block_sparse_moe\.gate\.|e_score_correction_bias|\.gate\.weight$)")
_REPLICATED = re.compile(r"(q_a_proj|kv_a_proj_with_mqa|fused_qkv_a_proj)\.")
_KV = re.compile(r"\.(k_proj|v_proj)\.")
_TP = re.compile(
    r"\.(q_proj|q_b_proj|kv_b_proj|o_proj|qkv_proj|gate_proj|up_proj|down_proj|gate_up_proj|w1|w2|w3|"
    r"c_attn|c_fc|c_proj|dense|query_key_value|dense_h_to_4h|dense_4h_to_h|wq|wk|wv|wo|"
    r"in_proj|out_proj|in_proj_qkvz|in_proj_ba|x_proj|dt_proj|conv1d|output_gate|linear|"
    r"fc1_latent_proj|fc2_latent_proj)\.|\.sinks$|\.A_log$"
)
_VISION = re.compile(r"^(vision_tower|visual|vision_model|mm_projector|multi_modal_projector)\.")


@dataclass(frozen=True)
class WeightsSplit:
    """Weight bytes of one GPU of each pipeline stage (TP ranks of a stage are alike)."""

    per_stage: tuple[int, ...]
    total_bytes: int  # the whole checkpoint as loaded (MTP layers left out)
    source: str  # "safetensors" | "index" | "estimate" | "gguf"
    exact: bool
    by_kind: dict = field(default_factory=dict)  # kind -> bytes on the first stage's GPU
    fallback_tensors: tuple[str, ...] = ()  # names split by TP for want of a rule
    notes: tuple[str, ...] = ()
    # online FP8 (--quantization fp8 on a 16-bit checkpoint): per_stage is the quantized size;
    # these hold, per stage, the same weights before quantization and the largest decoder
    # layer's quantized tensors in 16 bits (what a layer-by-layer load holds on top)
    unquantized_per_stage: tuple[int, ...] = ()
    largest_layer_unquantized: tuple[int, ...] = ()
    quantized_per_stage: tuple[int, ...] = ()  # the FP8 bytes of the tensors quantized

    @property
    def max_per_gpu(self) -> int:
        return max(self.per_stage) if self.per_stage else 0


def classify(name: str) -> str:
    """The split rule for one tensor name: vocab, expert, replicated, kv, tp or fallback."""
    if _VOCAB.search(name):
        return "vocab"
    if _EXPERT.search(name) and not _SHARED.search(name):
        return "expert"
    if _NORM.search(name) or _ROUTER.search(name) or _REPLICATED.search(name):
        return "replicated"
    if _KV.search(name):
        return "kv"
    if _TP.search(name) or _SHARED.search(name):
        return "tp"
    if _VISION.search(name):
        return "vision"
    return "fallback"


def split_weights(spec: ModelSpec, *, tp: int = 1, pp: int = 1, dp: int = 1,
                  expert_parallel: bool = False, vocab_padding: int = 64, run_dtype: str | None = None,
                  expert_padding: tuple[int, int] | None = None, attention_tp: int | None = None,
                  embedding_replicated: bool = False, online: str | None = None,
                  pp_partition: tuple[int, ...] | None = None) -> WeightsSplit:
    """Per-GPU weight bytes for each pipeline stage.

    attention_tp: the ranks the attention weights are split over when that differs from tp
    (SGLang's DP attention); embedding_replicated: the input embedding held whole per rank.

    run_dtype: the dtype the engine runs the model in. A float32 checkpoint run in 16 bits
    (vLLM's "auto" casts float32 down: config.py _get_and_verify_dtype) loads its float32
    tensors at half their stored size; quantization scales keep their dtype.

    online: the quantization vLLM applies to a 16-bit checkpoint as it loads it: "fp8"
    (`--quantization fp8`: the weights of linear layers and experts to one byte per element;
    embeddings, lm_head, norms, routers and biases keep their dtype) or "experts_int8" (the
    MoE experts only); see online_bytes.
    """
    downcast = (run_dtype or "").lower() in ("bfloat16", "float16", "half") and _stored_float32(spec)
    pad = _expert_pad_factor(spec, tp=1 if expert_parallel else tp, multiples=expert_padding)
    tensors, source, exact, notes = _tensors(spec, run_dtype)
    if downcast:
        tensors, notes = _cast_float32(spec, tensors, source, run_dtype), (
            *notes, f"float32 checkpoint loaded as {run_dtype}: its float tensors take half their stored size")
        exact = exact and source == "safetensors"
    if not tensors:
        total = _known_total(spec)
        if total is not None and downcast:
            total //= 2
        if total is None:
            from servepilot.errors import BadInput

            raise BadInput(f"{spec.path}: the weights' size is unknown (no safetensors headers, index or architecture)")
        per = cdiv(total, max(1, tp) * max(1, pp))
        return WeightsSplit((per,) * max(1, pp), total, source, False, {"fallback": per}, (),
                            (*notes, f"no per-tensor layout: {total:,} B divided by TP × PP",))
    att = spec.attention
    num_layers = att.num_layers if att else None
    kv_heads = att.num_kv_heads if att and att.kind != "mla" else None
    num_experts = spec.moe.num_experts if spec.moe else None
    vocab = spec.vocab_size
    stages = (pp_layer_ranges(num_layers, pp, pp_partition) if num_layers
              else [range(0, 1 << 30)] * 1)
    per_stage = [0.0] * max(1, pp)
    unquantized = [0.0] * max(1, pp)
    quantized = [0.0] * max(1, pp)
    layer_unquantized: dict[int, float] = {}  # decoder layer -> its quantized tensors in 16 bits
    by_kind: dict[str, float] = {}
    fallback: list[str] = []
    skipped_mtp = 0
    loaded_total = 0
    ep = max(1, tp) * max(1, dp)
    # a GGUF without an output tensor ties lm_head to the embedding (vLLM's gguf_loader sets
    # tie_word_embeddings when lm_head.weight is missing from the file, load_model@v0.10.2)
    tied = spec.tie_word_embeddings or (
        source == "gguf" and not any(_LM_HEAD.search(t.name) for t in tensors))
    for t in tensors:
        kind = classify(t.name)
        m = _LAYER.search(t.name)
        layer = int(m.group(1)) if m else None
        if layer is not None and num_layers is not None and layer >= num_layers:
            skipped_mtp += t.nbytes
            continue
        loaded_total += t.nbytes
        t_tp = tp
        if attention_tp is not None and ".self_attn." in t.name:
            t_tp = attention_tp
        elif embedding_replicated and kind == "vocab" and not _LM_HEAD.search(t.name):
            t_tp = 1
        share = _share(kind, t, tp=t_tp, kv_heads=kv_heads, num_experts=num_experts, ep=ep,
                       expert_parallel=expert_parallel, vocab=vocab, vocab_padding=vocab_padding)
        if kind == "expert":
            share *= pad
        if kind in ("fallback", "vision"):
            fallback.append(t.name)
        before, ratio = share, 1.0
        if online:
            ratio = online_bytes(t, kind, online) / t.nbytes if t.nbytes else 1.0
            share *= ratio
            if ratio < 1.0 and layer is not None:
                layer_unquantized[layer] = layer_unquantized.get(layer, 0.0) + before
        for s, rng in enumerate(stages[: len(per_stage)]):
            if _on_stage(t.name, kind, layer, s, rng, len(per_stage), tied):
                per_stage[s] += share
                unquantized[s] += before
                quantized[s] += share if ratio < 1.0 else 0.0
                if s == 0:
                    by_kind[kind] = by_kind.get(kind, 0) + share
    if pad != 1.0:
        notes = (*notes, f"MXFP4 experts padded to the kernel's multiples when loaded: x{pad:.3f}")
        exact = False
    if skipped_mtp:
        notes = (*notes, f"{skipped_mtp:,} B in layers past num_hidden_layers (MTP) are not loaded without speculative "
                         "decoding")
    if fallback:
        notes = (*notes,
                 f"{len(fallback)} tensor(s) with no split rule (divided by TP): {', '.join(fallback[:3])}"
                 + (" ..." if len(fallback) > 3 else ""))
    scale = 1.0
    if source == "index" and tp * pp == 1 and not skipped_mtp and not expert_parallel:
        exact = True  # one GPU holds the whole index total (vocab padding aside)
    if source == "index":
        # Architecture proportions scaled to the index's exact total.
        index_total = _known_total(spec) or loaded_total
        if downcast:
            # the index counts the float32 bytes: keep the proportion that is loaded in 16 bits
            stored = sum(t.nbytes for t in architecture_tensors(spec))
            index_total = int(index_total * sum(t.nbytes for t in tensors) / stored) if stored else index_total
        scale = index_total / (loaded_total + skipped_mtp) if loaded_total else 1.0
        loaded_total = int(loaded_total * scale)
    largest = ()
    if online:
        largest = tuple(
            int(round(scale * max((b for i, b in layer_unquantized.items() if i in rng),
                                  default=0)))
            for rng in stages[: len(per_stage)])
    return WeightsSplit(
        per_stage=tuple(int(round(b * scale)) for b in per_stage),
        total_bytes=loaded_total,
        source=source,
        exact=exact,
        by_kind={k: int(round(v * scale)) for k, v in by_kind.items()},
        fallback_tensors=tuple(fallback),
        notes=notes,
        unquantized_per_stage=(tuple(int(round(b * scale)) for b in unquantized)
                               if online else ()),
        largest_layer_unquantized=largest,
        quantized_per_stage=(tuple(int(round(b * scale)) for b in quantized)
                             if online else ()),
    )


def online_bytes(t: TensorInfo, kind: str, method: str = "fp8") -> int:
    """A tensor's bytes once vLLM's online quantization has quantized it: one byte per element
    for the weight of a linear layer or expert with "fp8" (Fp8LinearMethod / Fp8MoEMethod:
    scaled_fp8_quant, the per-tensor float32 scales are a few bytes), for an expert only with
    "experts_int8" (ExpertsInt8MoEMethod: int8 experts and float32 per-row scales, 4 bytes per
    row of hidden-size elements, left out; UnquantizedLinearMethod for every linear layer),
    its stored bytes for everything else. Router
    gates are built without the quant config (ReplicatedLinear(..., quant_config=None) in
    models/mixtral.py, qwen2_moe.py, deepseek_v2.py @v0.13.0), vocab embeddings are not
    LinearBase layers, and norms, biases and 1-D parameters are not weights of a linear layer.
    Fused expert tensors without a ".weight" suffix (experts.gate_up_proj) are weights too."""
    if method == "experts_int8":
        linear = kind == "expert"
    else:
        linear = kind in ("tp", "kv", "expert") or (
            kind == "replicated" and bool(_REPLICATED.search(t.name)))
    if not linear or len(t.shape) < 2 or _NOT_A_WEIGHT.search(t.name):
        return t.nbytes
    elements = 1
    for d in t.shape:
        elements *= int(d)
    return min(t.nbytes, elements)


def _expert_pad_factor(spec: ModelSpec, *, tp: int, multiples: tuple[int, int] | None) -> float:
    """How much larger the routed experts are once their intermediate size per partition and
    hidden size are rounded up to (intermediate, hidden) multiples (mxfp4_moe_padding)."""
    if not multiples or spec.moe is None or not spec.hidden_size:
        return 1.0
    inter = spec.moe.expert_intermediate_size or spec.intermediate_size
    if not inter:
        return 1.0
    part = max(1, inter // max(1, tp))
    hidden = spec.hidden_size
    mi, mh = multiples
    return (cdiv(part, mi) * mi) * (cdiv(hidden, mh) * mh) / (part * hidden)


def _stored_float32(spec: ModelSpec) -> bool:
    return (spec.dtype or "").lower() in ("float32", "float")


_SCALE = re.compile(r"(scale|scale_inv|zeros|qzeros|g_idx)$")
_NOT_A_WEIGHT = re.compile(r"(bias|scale|scale_inv|zeros|qzeros|g_idx|A_log|sinks)$")


def _cast_float32(spec: ModelSpec, tensors: list[TensorInfo], source: str, run_dtype: str) -> list[TensorInfo]:
    """The tensors as loaded in a 16-bit run dtype: F32 weights at 2 bytes an element."""
    from dataclasses import replace

    if source != "safetensors":  # synthetic: rebuild the architecture in the run dtype
        return architecture_tensors(replace(spec, dtype=run_dtype))
    return [replace(t, nbytes=t.nbytes // 2) if str(t.dtype).upper() in ("F32", "FLOAT32") and not _SCALE.search(t.name)
            else t for t in tensors]


def _share(kind, t: TensorInfo, *, tp, kv_heads, num_experts, ep, expert_parallel, vocab, vocab_padding) -> float:
    tp = max(1, tp)
    if kind == "replicated" or len(t.shape) <= 1 and kind not in ("vocab", "kv", "tp", "expert"):
        return float(t.nbytes)
    if kind == "vocab":
        if vocab:
            padded = cdiv(vocab, vocab_padding) * vocab_padding
            return t.nbytes * cdiv(padded, tp) / vocab
        return t.nbytes / tp
    if kind == "kv":
        if kv_heads:
            return t.nbytes * max(1, kv_heads // tp) / kv_heads
        return t.nbytes / tp
    if kind == "expert":
        if expert_parallel and num_experts:
            return t.nbytes * cdiv(num_experts, ep) / num_experts
        return t.nbytes / tp
    return t.nbytes / tp


def _on_stage(name: str, kind: str, layer: int | None, stage: int, rng: range, n_stages: int, tied: bool) -> bool:
    if layer is not None:
        return layer in rng
    if kind == "vocab":
        is_head = bool(_LM_HEAD.search(name))
        if is_head:
            return stage == n_stages - 1
        return stage == 0 or (tied and stage == n_stages - 1)
    if _NORM.search(name):  # the final norm
        return stage == n_stages - 1
    return stage == 0  # vision tower and other non-layer tensors


def _known_total(spec: ModelSpec) -> int | None:
    w = spec.weights
    if w is None:
        return None
    return w.total_bytes or w.index_total_bytes


def _tensors(spec: ModelSpec, run_dtype: str | None = None
             ) -> tuple[list[TensorInfo], str, bool, tuple[str, ...]]:
    w = spec.weights
    if w is not None and w.tensors and not w.damaged:
        if spec.format == "gguf":
            from servepilot.planning.gguf_names import gguf_as_loaded

            return gguf_as_loaded(w.tensors, run_dtype), "gguf", True, (
                "GGUF tensors held in their stored types (vLLM's GGUFLinearMethod / "
                "GGUFEmbeddingMethod keep the quantized blocks; F32 tensors in the run dtype)",)
        return list(w.tensors), "safetensors", True, ()
    notes: tuple[str, ...] = ()
    if w is not None and w.damaged:
        notes = (f"{len(w.damaged)} damaged shard(s): headers not used",)
    synthetic = architecture_tensors(spec)
    if w is not None and _known_total(spec) and w.source in ("index", "safetensors", "gguf"):
        return synthetic, "index", False, (*notes, "split in the proportions of the architecture, scaled to the index "
                                                   "total")
    return synthetic, "estimate", False, (*notes, "weights estimated from the architecture (config.json)")


def architecture_tensors(spec: ModelSpec) -> list[TensorInfo]:
    """The tensors a checkpoint of this architecture holds (checkpoint/estimate.tensor_shapes,
    the one per-layer count), each with its stored bytes under the declared quantization."""
    from servepilot.checkpoint.estimate import stored_tensors

    return [TensorInfo(name=t.name, dtype="synthetic", shape=t.shape, nbytes=nbytes)
            for t, nbytes in stored_tensors(spec)]
