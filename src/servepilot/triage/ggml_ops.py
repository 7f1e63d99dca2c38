"""What a ggml backend refused: the KV cache, a weight of the model file, or an op it lacks.

llama.cpp's backends (CUDA, Metal, Vulkan, SYCL, CANN, BLAS) abort when the graph hands them an
operation they have no kernel for on a tensor's type: "unsupported type combination (f32 to
q4_1)", "Missing op: ROPE for q8_0", Metal's `false && "not implemented"`, the scheduler's
"pre-allocated tensor (cache_k_l32 (view)) in a buffer (Vulkan0) that cannot run the operation
(CPY)". The message names the backend and the op; what the refused tensor IS names the fix:

- the KV cache (llama.cpp names it cache_k / cache_v, cache_k_l<N> / cache_v_l<N>, its views
  k_cache_view-<N>, the K-shift's K_shifted): the cache type (-ctk / -ctv) has no kernel for
  the op there -> `kv_cache_dtype`;
- a weight of the model file (GGUF names end in .weight / .bias): its tensor type has no kernel
  on this backend -> `quantization_support`;
- otherwise the op itself: which op and which types decide. Only the KV cache brings quantized
  data to RoPE (the context shift re-ropes the cached keys) and to a copy (the cache is the only
  quantized tensor llama.cpp writes); only weights bring quantized data to a matrix product's
  first operand or to a row lookup. An op refused on float activations is a gap of that backend
  (`other`).

Sources (llama-cpp-python's vendored llama.cpp and the 2023 tree in 0.1.77):
llama.cpp@v0.1.77 kv_cache_init (ggml_set_name "cache_k"/"cache_v");
src/llama.cpp@v0.3.2 (kv_cache_init "cache_k_l%d", llm_build_kv_store "k_cache_view",
build_k_shift "dequantize to f32 -> RoPE -> quantize back", "K_shifted");
src/llama-kv-cache.cpp@v0.3.36 ("cache_%sk_l%d", cpy_k with ggml_set_rows);
ggml/src/ggml.c@v0.3.36 (type_traits type_name: "q4_K", "iq2_xxs", "tq1_0", "mxfp4", ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The KV cache's own tensor names and those of its views and shifts (module docstring).
_KV_TENSOR = re.compile(
    r"\b(?:cache_(?:\w+_)?[kv](?:_l\d+)?|[kv]_cache(?:_view)?(?:-\d+)?"
    r"|K_shift(?:ed)?(?:_f32)?(?:-\d+)?)\b"
)
# A GGUF tensor of the model file (llama-arch.cpp names: blk.N.attn_q.weight, token_embd.weight).
_WEIGHT_TENSOR = re.compile(r"\b[\w.]+\.(?:weight|bias)\b")

# ggml's type names (ggml.c type_traits) by kind; the match is case-insensitive, and the upper
# case enum spelling (GGML_TYPE_Q4_K) is read the same way.
_FLOAT_TYPES = frozenset({"f32", "f16", "bf16", "f64"})
_INT_TYPES = frozenset({"i8", "i16", "i32", "i64"})
_QUANT_TYPE = re.compile(
    r"\b(?:GGML_TYPE_)?(?P<t>q[1-8]_(?:0|1|k)|iq[1-4]_(?:xxs|xs|s|m|nl)|tq[12]_0|mxfp4|nvfp4"
    r"|q4_0_[48]x[48])\b",
    re.IGNORECASE,
)
_ANY_TYPE = re.compile(
    r"\b(?:GGML_TYPE_)?(?P<t>f32|f16|bf16|f64|i8|i16|i32|i64"
    r"|q[1-8]_(?:0|1|k)|iq[1-4]_(?:xxs|xs|s|m|nl)|tq[12]_0|mxfp4|nvfp4)\b",
    re.IGNORECASE,
)

# ggml op names (ggml.c GGML_OP_NAME) grouped by what feeds them a non-float tensor in llama.cpp.
_KV_OPS = frozenset({"ROPE", "CPY", "SET_ROWS", "DUP", "CONT"})  # K-shift; cache writes and reads
_WEIGHT_OPS = frozenset({"MUL_MAT", "MUL_MAT_ID", "GET_ROWS"})  # matmul first operand; embeddings
# An op named by the kernel file that asserted (ggml-cuda/rope.cu, ggml-sycl/cpy.cpp, getrows.cu).
_FILE_OPS = {
    "rope": "ROPE", "cpy": "CPY", "set-rows": "SET_ROWS", "getrows": "GET_ROWS",
    "get_rows": "GET_ROWS",
    "mmvq": "MUL_MAT", "mmq": "MUL_MAT", "mmvf": "MUL_MAT", "mmf": "MUL_MAT", "dmmv": "MUL_MAT",
}
_OP_WORDS = {
    "MUL MAT-MAT": "MUL_MAT", "MUL MAT-VEC": "MUL_MAT", "MUL_MAT_ID": "MUL_MAT_ID",
    "mul_mat": "MUL_MAT", "mul_mat_id": "MUL_MAT_ID", "cpy": "CPY", "quantized target": "CPY",
}

# ggml's enum ggml_type ids (ggml/include/ggml.h@v0.3.36) for Metal's "Asserting on type %d";
# the ids never change once given (removed ones stay reserved).
_TYPE_IDS = {
    0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 9: "q8_1",
    10: "q2_K", 11: "q3_K", 12: "q4_K", 13: "q5_K", 14: "q6_K", 15: "q8_K", 16: "iq2_xxs",
    17: "iq2_xs", 18: "iq3_xxs", 19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s", 23: "iq4_xs",
    24: "i8", 25: "i16", 26: "i32", 27: "i64", 28: "f64", 29: "iq1_m", 30: "bf16", 34: "tq1_0",
    35: "tq2_0", 39: "mxfp4", 40: "nvfp4",
}


# What to change, per judged category: (kind, change, trade-off, servepilot check).
REMEDIES = {
    "kv_cache_dtype": (
        ("flag", "drop -ctk/-ctv (--cache-type-k/-v) or set them to f16",
         "an f16 cache takes about twice the memory of q8_0: fewer tokens of context in the same "
         "memory", "SP-KV-001"),
        ("upgrade", "a llama.cpp build whose backend has the kernel for this cache type",
         "rebuild or new binary", None),
    ),
    "quantization_support": (
        ("flag",
         "-m with a GGUF of the model in a tensor type this backend supports (Q4_K, Q8_0, ...)",
         "download; another size and quality", "SP-GGUF-003"),
        ("upgrade", "a llama.cpp build whose backend has kernels for this tensor type",
         "rebuild or new binary", None),
        ("flag", "-ngl 0 (run on the CPU)", "much slower generation", None),
    ),
    "cuda_driver_arch": (
        ("flag", "-ngl 0 (run on the CPU)", "much slower generation", None),
        ("hardware", "an Apple-silicon Mac (or another GPU backend)", "other hardware", None),
    ),
    "other": (
        ("upgrade", "a llama.cpp build whose backend implements this op", "rebuild or new binary",
         None),
        ("flag", "-ngl 0, or fewer layers on this backend", "slower generation", None),
    ),
}


@dataclass(frozen=True)
class Refusal:
    """What a backend refused, as far as the message (and the log around it) says."""

    op: str | None
    tensor: str | None
    types: tuple[str, ...]


def read_refusal(groups: dict) -> Refusal:
    """The op, the tensor's name and the types a backend's refusal names."""
    op = (groups.get("op") or "").strip() or None
    if op is None and groups.get("file"):
        op = _FILE_OPS.get(groups["file"].lower())
    if op is None and " to " in (groups.get("types") or ""):
        op = "CPY"  # a copy's types are written "src to dst" (ggml-cuda/cpy.cu, ggml-sycl/cpy.cpp)
    if op is None and groups.get("what"):
        op = next((o for w, o in _OP_WORDS.items() if w in groups["what"]), None)
    if op is not None:
        op = _OP_WORDS.get(op, op).split("(")[0].strip().upper()
    types = [m.group("t").lower() for m in _ANY_TYPE.finditer(groups.get("types") or "")]
    if groups.get("typeid") and groups["typeid"].isdigit():
        types.append(_TYPE_IDS.get(int(groups["typeid"]), f"type {groups['typeid']}"))
    tensor = groups.get("tensor") or None
    return Refusal(op=op, tensor=tensor, types=tuple(dict.fromkeys(types)))


def _quantized(types: tuple[str, ...]) -> list[str]:
    return [t for t in types if t not in _FLOAT_TYPES and t not in _INT_TYPES]


def judge(groups: dict, default: str) -> tuple[str, str | None]:
    """(category, reason) for a backend's refusal; reason None keeps the row's explanation.

    `default` is the row's category: what the backend's own wording says when the message names
    neither the tensor nor its type (Metal's 2023 type-switch asserts: quantization_support).
    """
    r = read_refusal(groups)
    where = f" ({r.op})" if r.op else ""
    if r.tensor and _KV_TENSOR.search(r.tensor):
        return "kv_cache_dtype", (
            f"The tensor the backend could not run{where} on is the KV cache ({r.tensor}): the "
            "cache type chosen with -ctk/-ctv (--cache-type-k/-v) has no kernel for this op on "
            "this backend. An f16 cache, or a build whose backend has the kernel, avoids it."
        )
    if r.tensor and _WEIGHT_TENSOR.search(r.tensor):
        return "quantization_support", (
            f"The tensor the backend could not run{where} on is a weight of the model file "
            f"({r.tensor}): its tensor type has no kernel on this backend."
        )
    quant = _quantized(r.types)
    if groups.get("float_only") and r.op in _KV_OPS:
        # the kernel asserts a float input; only the KV cache brings it a quantized tensor
        return "kv_cache_dtype", (
            f"The backend's {r.op} kernel takes only float tensors and was handed a quantized "
            "one: in llama.cpp that is the quantized KV cache (-ctk/-ctv), re-roped by the "
            "context shift or copied. An f16 K cache (or no context shift) avoids it."
        )
    # a backend that says it refused the type without naming it (CANN's per-op type switches)
    if groups.get("refused") and not r.types and r.op in _KV_OPS:
        return "kv_cache_dtype", (
            f"The backend has no {r.op} kernel for the written tensor's type: in llama.cpp the "
            "tensor written by a copy is the KV cache, so the cache type (-ctk/-ctv) is what "
            "this backend cannot store."
        )
    if groups.get("refused") and not r.types and r.op in _WEIGHT_OPS:
        return "quantization_support", (
            f"The backend has no {r.op} kernel for the first operand's type: a weight of the "
            "model file, stored in a type this backend cannot multiply or look up."
        )
    if groups.get("float_only") and r.op in _WEIGHT_OPS:
        return "quantization_support", (
            f"The backend's {r.op} kernel takes only float tensors and was handed a quantized "
            "one: a weight of the model file (the token embeddings for a row lookup)."
        )
    if quant and r.op in _KV_OPS:
        return "kv_cache_dtype", (
            f"The backend has no {r.op} kernel for {'/'.join(quant)}: a quantized tensor copied "
            "or roped is the KV cache in llama.cpp (weights are never written), so the cache "
            "type (-ctk/-ctv) is what this backend cannot handle."
        )
    if (quant or "bf16" in r.types) and (r.op in _WEIGHT_OPS or r.op is None):
        kinds = "/".join(quant or ["bf16"])
        return "quantization_support", (
            f"The backend has no kernel{where} for the tensor type {kinds}: the model file's "
            "weights are stored in a type this backend (in this build) cannot multiply or look "
            "up. A file in a type the backend supports, a newer build, or CPU offload avoids it."
        )
    if r.types and not quant and not groups.get("float_only"):
        return "other", (
            f"The backend lacks the op{where} for {'/'.join(r.types)} tensors (activations, "
            "not the KV cache or a quantized weight): a gap of this backend in this build; a "
            "newer build, or running the layers on the CPU, avoids it."
        )
    if r.tensor or (r.op and r.op not in _WEIGHT_OPS and not r.types):
        return "other", (
            f"The backend has no kernel for the op{where}"
            + (f" on {r.tensor}" if r.tensor else "")
            + ", which is neither the KV cache nor a weight of the model file: a gap of this "
            "backend in this build."
        )
    return default, None


# events.py's launch hint for a llama.cpp KV cache in a quantized type, as refine context shows it
QUANTIZED_KV_HINT = "[launch setting: quantized-kv-cache]"


def kv_rival(groups: dict, category: str, context: str) -> tuple[tuple[str, str], ...]:
    """The KV cache as a second reading: the log shows a quantized cache (-ctk/-ctv) and the
    refusal names no tensor, so the refused tensor may be the cache rather than what the words
    suggest (Metal's cpy switch and its mul_mat switch print the same "not implemented")."""
    if category == "kv_cache_dtype" or groups.get("tensor") or QUANTIZED_KV_HINT not in context:
        return ()
    return ((
        "kv_cache_dtype",
        "The log shows a KV cache in a quantized type (-ctk/-ctv), and the backend's refusal does "
        "not name the tensor: it may be the cache's type the backend has no kernel for. An f16 "
        "cache settles which.",
    ),)


# events.py's launch hint for a Mac GPU without SIMD-group reduction or matrix multiply
METAL_NO_SIMDGROUP_HINT = "[launch setting: metal-no-simdgroup]"


def device_lacks(category: str, context: str) -> tuple[str, str | None]:
    """An op gap on a Metal GPU that lacks SIMD-group features is the GPU's, not the build's.

    ggml_metal_supports_op (ggml-metal.m@v0.3.2) refuses MUL_MAT, MUL_MAT_ID, the norms and
    soft_max without SIMD-group reduction and FLASH_ATTN_EXT without SIMD-group matrix multiply:
    on such a GPU (Intel and AMD Macs, Apple GPUs before the A13/M1 family) the op is not missing
    from the build but from the device.
    """
    if category != "other" or METAL_NO_SIMDGROUP_HINT not in context:
        return category, None
    return "cuda_driver_arch", (
        "The Metal backend refused an op on a GPU that lacks SIMD-group reduction or matrix "
        "multiply (its init lines say so): llama.cpp's Metal kernels for matrix products, norms "
        "and flash attention need them. Run on the CPU (-ngl 0) or on an Apple-silicon GPU."
    )
