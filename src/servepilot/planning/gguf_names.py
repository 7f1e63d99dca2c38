"""GGUF tensor names as the Hugging Face modules vLLM and SGLang load them into.

vLLM serves a GGUF file by mapping each llama.cpp tensor name to the name of its Hugging Face
module (gguf.get_tensor_name_map, in _get_gguf_weights_map of
vllm/model_executor/model_loader/gguf_loader.py@v0.10.2) and loading it into the same
ColumnParallel / RowParallel / VocabParallel layers a safetensors checkpoint uses, with the
quantized blocks kept as they are stored (GGUFLinearMethod, GGUFEmbeddingMethod, GGUFMoEMethod
in vllm/model_executor/layers/quantization/gguf.py@v0.10.2; SGLang does the same in
GGUFModelLoader, sglang/srt/model_loader/loader.py@v0.5.5.post3, with its own copy of those
methods in sglang/srt/layers/quantization/gguf.py). So a GGUF tensor is split over
the GPUs by the rule of its Hugging Face module, at its stored (quantized) size.

The GGUF side of the table is gguf-py's own vocabulary (gguf.constants.TENSOR_NAMES: the
MODEL_TENSOR member -> "blk.{bid}.attn_q"); the Hugging Face side is the Llama / DeepSeek
module each member is mapped to (gguf/tensor_mapping.py), spelled so that
planning.weights.classify gives it the split rule vLLM's layer has.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache

from servepilot.checkpoint.spec import TensorInfo

_L = "model.layers.{bid}."
# MODEL_TENSOR member -> the module it is loaded into; None: no parameter takes it (vLLM
# computes the rotary embedding itself, so a GGUF's rope_freqs is never loaded)
_AS_HF: dict[str, str | None] = {
    "TOKEN_EMBD": "model.embed_tokens",
    "OUTPUT": "lm_head",
    "OUTPUT_NORM": "model.norm",
    "ROPE_FREQS": None,
    "ATTN_NORM": _L + "input_layernorm",
    "FFN_NORM": _L + "post_attention_layernorm",
    "ATTN_POST_NORM": _L + "post_attention_layernorm",
    "FFN_POST_NORM": _L + "post_feedforward_layernorm",
    "ATTN_Q_NORM": _L + "self_attn.q_norm",
    "ATTN_K_NORM": _L + "self_attn.k_norm",
    "ATTN_Q": _L + "self_attn.q_proj",
    "ATTN_K": _L + "self_attn.k_proj",
    "ATTN_V": _L + "self_attn.v_proj",
    "ATTN_QKV": _L + "self_attn.qkv_proj",
    "ATTN_OUT": _L + "self_attn.o_proj",
    "ATTN_SINKS": _L + "self_attn.sinks",
    # DeepSeek MLA: the down-projections are ReplicatedLinear, the up-projections split by TP
    "ATTN_Q_A": _L + "self_attn.q_a_proj",
    "ATTN_Q_B": _L + "self_attn.q_b_proj",
    "ATTN_KV_A_MQA": _L + "self_attn.kv_a_proj_with_mqa",
    "ATTN_KV_B": _L + "self_attn.kv_b_proj",
    "ATTN_Q_A_NORM": _L + "self_attn.q_a_layernorm",
    "ATTN_KV_A_NORM": _L + "self_attn.kv_a_layernorm",
    "FFN_GATE": _L + "mlp.gate_proj",
    "FFN_UP": _L + "mlp.up_proj",
    "FFN_DOWN": _L + "mlp.down_proj",
    "FFN_GATE_INP": _L + "mlp.gate",
    "FFN_EXP_PROBS_B": _L + "mlp.gate.e_score_correction_bias",
    "FFN_GATE_EXP": _L + "mlp.experts.gate_proj",
    "FFN_UP_EXP": _L + "mlp.experts.up_proj",
    "FFN_DOWN_EXP": _L + "mlp.experts.down_proj",
    "FFN_GATE_UP_EXP": _L + "mlp.experts.gate_up_proj",
    "FFN_GATE_SHEXP": _L + "mlp.shared_experts.gate_proj",
    "FFN_UP_SHEXP": _L + "mlp.shared_experts.up_proj",
    "FFN_DOWN_SHEXP": _L + "mlp.shared_experts.down_proj",
    "FFN_GATE_INP_SHEXP": _L + "mlp.shared_expert_gate",
}
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")
_SUFFIX = re.compile(r"^(.*?)(\.(?:weight|bias))?$")
_FLOAT32 = ("F32",)
_SIXTEEN_BITS = ("bfloat16", "float16", "half")


@lru_cache(maxsize=1)
def _gguf_to_hf() -> tuple[dict[str, str | None], dict[str, str | None]]:
    """GGUF base name -> HF module: (names outside the blocks, names inside "blk.{bid}.")."""
    from gguf.constants import MODEL_TENSOR, TENSOR_NAMES

    top: dict[str, str | None] = {}
    block: dict[str, str | None] = {}
    for member, hf in _AS_HF.items():
        tensor = getattr(MODEL_TENSOR, member, None)
        gguf_name = TENSOR_NAMES.get(tensor) if tensor is not None else None
        if gguf_name is None:
            continue  # a gguf release without this member
        if gguf_name.startswith("blk.{bid}."):
            block.setdefault(gguf_name.removeprefix("blk.{bid}."), hf)
        else:
            top.setdefault(gguf_name, hf)
    return top, block


def hf_name(name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor ("blk.3.attn_k.weight" ->
    "model.layers.3.self_attn.k_proj.weight"); a tensor the table does not know keeps its
    own name under "model.layers.N." (so its layer, and pipeline stage, still count); None for
    a tensor no parameter takes."""
    top, block = _gguf_to_hf()
    base, suffix = _SUFFIX.match(name).groups()
    suffix = suffix or ""
    m = _BLOCK.match(base)
    if m:
        bid, rest = m.groups()
        if rest not in block:
            return f"model.layers.{bid}.{rest}{suffix}"
        hf = block[rest]
        return None if hf is None else hf.format(bid=bid) + suffix
    if base not in top:
        return name
    hf = top[base]
    return None if hf is None else hf + suffix


def gguf_as_loaded(tensors, run_dtype: str | None = None) -> list[TensorInfo]:
    """The GGUF tensors under the names of the modules they are loaded into, at the bytes they
    take there: quantized and 16-bit tensors as stored; F32 tensors (norms, and the weights
    load_model lists in quant_config.unquantized_modules) are created in the model dtype
    (set_default_torch_dtype(model_config.dtype) in gguf_loader.py@v0.10.2), so two bytes an
    element when that dtype has 16 bits."""
    cast = (run_dtype or "").lower() in _SIXTEEN_BITS
    out = []
    for t in tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        nbytes = t.nbytes // 2 if cast and str(t.dtype).upper() in _FLOAT32 else t.nbytes
        out.append(replace(t, name=name, nbytes=nbytes))
    return out
