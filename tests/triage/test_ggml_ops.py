"""A ggml backend refusing an op (issue 13): what the refused tensor IS decides the category.

Each log line is worded as llama.cpp's backends print it (the source is beside each; the
versions are the llama.cpp trees vendored by llama-cpp-python 0.1.77, 0.3.2 and 0.3.36). Each
mechanism has a neighbour with the same words that must decide the other way: the same abort
on an activation is not the KV cache, on a weight it is the model file's type.
"""

from __future__ import annotations

import pytest

from servepilot.triage import triage_text
from servepilot.triage.ggml_ops import judge, read_refusal

# A llama-server start on a GPU with a q8_0 KV cache, up to the first request
# (src/llama-kv-cache.cpp@v0.3.36: "llama_kv_cache: size = ..., K (q8_0): ..., V (q8_0): ...").
START = (
    "build: 5435 (a4090d11) with cc (Ubuntu 13.3.0) for x86_64-linux-gnu\n"
    "llama_kv_cache: size = 1088.00 MiB ( 4096 cells,  32 layers,  1/1 seqs), "
    "K (q8_0):  544.00 MiB, V (q8_0):  544.00 MiB\n"
    "main: server is listening on http://127.0.0.1:8080 - starting the main loop\n"
)

# ggml-backend.cpp@v0.3.36 ggml_backend_sched_backend_id_from_cur, GGML_ABORT's "file:line: "
SCHED = (
    "ggml-backend.cpp:941: pre-allocated tensor ({tensor}) in a buffer ({buf}) that cannot run "
    "the operation ({op})"
)


@pytest.mark.parametrize(
    ("tensor", "op", "category"),
    [
        # the K cache's view being written (SET_ROWS in builds with cpy_k through ggml_set_rows)
        ("cache_k_l0 (view)", "SET_ROWS", "kv_cache_dtype"),
        # a tagged cache of a hybrid model (llama-kv-cache.cpp "cache_%sk_l%d")
        ("cache_swa_v_l12 (view)", "CPY", "kv_cache_dtype"),
        # the old graph's named view of the V cache (src/llama.cpp@v0.3.2 "v_cache_view")
        ("v_cache_view-7", "CPY", "kv_cache_dtype"),
        # neighbours: a weight of the model file, an activation
        ("blk.3.ffn_down.weight", "MUL_MAT", "quantization_support"),
        ("ffn_inp-3", "ADD", "other"),
    ],
)
def test_the_scheduler_abort_is_judged_by_the_tensor_it_names(tensor, op, category):
    d = triage_text(START + SCHED.format(tensor=tensor, buf="Vulkan0", op=op) + "\n")
    assert d.root_cause.signature == "ggml-sched-op-unsupported"
    assert d.root_cause.category == category
    assert d.root_cause.line == 4


def test_a_kv_cache_verdict_offers_an_f16_cache():
    d = triage_text(START + SCHED.format(tensor="cache_k_l31 (view)", buf="SYCL0", op="CPY") + "\n")
    assert any("-ctk" in r.change for r in d.remedies)
    assert "KV cache" in d.root_cause.explanation


@pytest.mark.parametrize(
    ("line", "category"),
    [
        # ggml-cuda/rope.cu@v0.3.2 asserts float input; the context shift re-ropes a q8_0 K cache
        ("GGML_ASSERT: /src/llama.cpp/ggml-cuda/rope.cu:238: src0->type == GGML_TYPE_F32 || "
         "src0->type == GGML_TYPE_F16", "kv_cache_dtype"),
        # neighbour: the same float assert in a kernel the cache never feeds (a norm)
        ("GGML_ASSERT: /src/llama.cpp/ggml-cuda/norm.cu:200: src0->type == GGML_TYPE_F32 || "
         "src0->type == GGML_TYPE_F16", "other"),
        # the newer assert wording and other backends (ggml-sycl/rope.cpp@v0.3.36); a float-only
        # row lookup handed a quantized tensor is the token embedding (ggml-sycl/getrows.cpp);
        # a float-only activation kernel (ggml-cuda/unary.cu) is neither
        ("/ggml/src/ggml-sycl/rope.cpp:487: GGML_ASSERT(src0->type == GGML_TYPE_F32 || "
         "src0->type == GGML_TYPE_F16) failed", "kv_cache_dtype"),
        ("/ggml/src/ggml-sycl/getrows.cpp:452: GGML_ASSERT(src0->type == GGML_TYPE_F32 || "
         "src0->type == GGML_TYPE_F16) failed", "quantization_support"),
        ("/ggml/src/ggml-cuda/unary.cu:146: GGML_ASSERT(src0->type == GGML_TYPE_F32 || src0->type "
         "== GGML_TYPE_F16 || src0->type == GGML_TYPE_BF16) failed", "other"),
        # ggml-cuda/cpy.cu@v0.3.36: a copy from a quantized type is the cache (weights are never
        # copied); neighbour: the copy between float activations
        ("ggml-cuda/cpy.cu:617: ggml_cuda_cpy: unsupported type combination (q4_1 to f32)",
         "kv_cache_dtype"),
        ("ggml-cuda/cpy.cu:617: ggml_cuda_cpy: unsupported type combination (f32 to i32)", "other"),
        # ggml-vulkan.cpp@v0.3.36 "ggml_vulkan: Error: Missing op: %s for %s [and %s]"
        ("ggml_vulkan: Error: Missing op: ROPE for q8_0", "kv_cache_dtype"),
        ("ggml_vulkan: Error: Missing op: MUL_MAT for iq1_m and f32", "quantization_support"),
        ("ggml_vulkan: Error: Missing op: GELU_ERF for f32", "other"),
        # ggml-vulkan.cpp@v0.3.2 ggml_vk_get_cpy_pipeline: "Missing CPY op for types: %s %s"
        ("Missing CPY op for types: f32 q5_1", "kv_cache_dtype"),
        ("Missing CPY op for types: f32 i32", "other"),
        # the graph loop's report before GGML_ASSERT(ok) names the node (ggml-cuda.cu@v0.3.36)
        ("ggml_backend_cuda_graph_compute: op not supported cache_v_l3 (view) (SET_ROWS)",
         "kv_cache_dtype"),
        ("ggml_backend_sycl_graph_compute: error: op not supported ffn_gate-2 (UNARY)", "other"),
        # ggml-sycl/cpy.cpp@v0.3.36: a copy into a quantized tensor is a cache write
        ("unsupported quantized target type in sycl quantizer src1->type=iq4_nl", "kv_cache_dtype"),
        # ggml-sycl/getrows.cpp: the token embedding's type
        ("ggml_sycl_get_rows: unsupported type: tq2_0", "quantization_support"),
        # ggml-cann/aclnn_ops.cpp@v0.3.36: mul_mat switches on src0's type (a weight), SET_ROWS
        # on the written tensor's (the cache)
        ("ggml-cann/aclnn_ops.cpp:2418: Unsupported type for mul_mat", "quantization_support"),
        ("ggml-cann/aclnn_ops.cpp:2160: Unsupported tensor type for GGML_OP_SET_ROWS",
         "kv_cache_dtype"),
        # ggml-metal.m@v0.3.2: an op Metal's supports_op refuses, no type named
        ("ggml_metal_encode_node: error: unsupported op 'IM2COL'", "other"),
    ],
)
def test_backend_refusals_are_judged_by_op_and_type(line, category):
    d = triage_text(START + line + "\n")
    assert d.root_cause.category == category, d.root_cause.explanation
    assert d.root_cause.line == 4


@pytest.mark.parametrize(
    "log",
    [
        # ggml-metal.m@v0.1.77: the mul_mat type switch prints the type's id before asserting
        "Asserting on type 8\nGGML_ASSERT: ggml-metal.m:738: false && \"not implemented\"\n",
        # ggml-metal.m@v0.3.2: GGML_ABORT("MUL MAT-MAT not implemented") for a bf16 weight
        "/tmp/llama.cpp/ggml/src/ggml-metal/ggml-metal.m:1959: MUL MAT-MAT not implemented\n",
        # ggml-metal-device.cpp@v0.3.36: the mul_mv pipeline's switch over src0's type
        "/llama.cpp/ggml/src/ggml-metal/ggml-metal-device.cpp:1064: not implemented\n",
    ],
)
def test_metal_type_switch_defaults_are_the_weights_type(log):
    d = triage_text(log)
    assert d.root_cause.category == "quantization_support"


def test_metal_type_id_is_named():
    # enum ggml_type (ggml.h): 8 is q8_0
    assert read_refusal({"typeid": "8"}).types == ("q8_0",)
    category, reason = judge({"typeid": "8"}, "quantization_support")
    assert category == "quantization_support" and "q8_0" in reason


def test_a_metal_not_implemented_outside_ggml_metal_m_is_not_read_as_a_type():
    # ggml-metal-device.cpp@v0.3.36's `false && "not implemented"` is a pool-op switch, not types
    d = triage_text("ggml-metal-device.cpp:107: GGML_ASSERT(false && \"not implemented\") failed\n")
    assert d.root_cause.category != "quantization_support"


def test_a_kv_name_in_the_tensor_outranks_a_quantized_type():
    # the name says what the tensor is; a q4_0 type alone would have read as a weight
    category, _ = judge({"tensor": "cache_v_l3", "op": "MUL_MAT", "types": "q4_0"}, "other")
    assert category == "kv_cache_dtype"
    category, _ = judge({"op": "MUL_MAT", "types": "q4_0"}, "other")
    assert category == "quantization_support"


# Metal's cpy switch and its mul_mat switch abort with the same words (ggml-metal.m@v0.3.2
# GGML_ABORT("not implemented")): with a quantized cache in the log, the cache is a second reading.
METAL_BARE = "/llama.cpp/ggml/src/ggml-metal/ggml-metal.m:3370: not implemented\n"


def test_a_quantized_cache_in_the_log_is_a_rival_reading_of_a_bare_metal_abort():
    d = triage_text(START + METAL_BARE)
    assert d.root_cause.category == "quantization_support"
    rival = next(a for a in d.alternatives if a.category == "kv_cache_dtype")
    assert rival.basis == "rival" and rival.confidence < d.root_cause.confidence


def test_an_f16_cache_gives_no_kv_rival():
    f16_start = START.replace("K (q8_0)", "K (f16)").replace("V (q8_0)", "V (f16)")
    d = triage_text(f16_start + METAL_BARE)
    assert d.root_cause.category == "quantization_support"
    assert not [a for a in d.alternatives if a.category == "kv_cache_dtype"]


def test_the_cache_flags_on_a_command_line_are_the_same_hint():
    # a wrapper's echo of the server command line (llama.cpp common/arg.cpp -ctk / --cache-type-k)
    d = triage_text("cmd: llama-server -m /m.gguf -ngl 99 --cache-type-k q4_0\n" + METAL_BARE)
    assert any(a.category == "kv_cache_dtype" for a in d.alternatives)


def test_flash_attention_without_the_cache_type_pair_is_the_kv_cache():
    # ggml-cuda/fattn-common.cuh@v0.3.2 on_no_fattn_vec_case, then GGML_ABORT("fatal error")
    d = triage_text(
        START
        + "Unsupported KV type combination for head_size 128.\n"
        "Supported combinations:\n"
        "  - K == q4_0, V == q4_0,  4.50 BPV\n"
        "  - K == q8_0, V == q8_0,  8.50 BPV\n"
        "  - K == f16,  V == f16,  16.00 BPV\n"
        "Compile with GGML_CUDA_FA_ALL_QUANTS for all combinations of q4_0, q4_1, q5_0, q5_1, "
        "q8_0, and f16.\n"
        "/src/ggml/src/ggml-cuda/fattn-common.cuh:576: fatal error\n"
    )
    assert d.root_cause.category == "kv_cache_dtype"
    assert d.root_cause.line == 4


def test_flash_attention_refusing_a_head_size_is_not_the_kv_cache():
    # neighbour: the same kernels refusing the model's head size (fattn-tile-f16.cu@v0.3.2)
    d = triage_text(
        "/src/ggml/src/ggml-cuda/fattn-tile-f16.cu:303: FlashAttention without tensor "
        "cores only supports head sizes 64 and 128.\n"
    )
    assert d.root_cause is not None and d.root_cause.category != "kv_cache_dtype"



# ggml-metal.m@v0.3.2 ggml_metal_init's device lines, then its encoder's refusal
def _metal_start(supported: str) -> str:
    return (
        "ggml_metal_init: found device: AMD Radeon Pro 5500M\n"
        f"ggml_metal_init: simdgroup reduction   = {supported}\n"
        f"ggml_metal_init: simdgroup matrix mul. = {supported}\n"
        "ggml_metal_encode_node: error: unsupported op 'MUL_MAT'\n"
    )


def test_an_op_refused_on_a_mac_gpu_without_simdgroup_features_is_the_device():
    d = triage_text(_metal_start("false"))
    assert d.root_cause.category == "cuda_driver_arch"
    assert d.root_cause.line == 4


def test_the_same_refusal_on_a_gpu_with_the_features_is_a_gap_of_the_build():
    d = triage_text(_metal_start("true"))
    assert d.root_cause.category == "other"
