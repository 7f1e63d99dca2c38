"""Mechanisms that carry over to failures not seen yet (issue 13), each on real corpus lines.

Every line below is verbatim from a corpus row (corpus/excerpts.jsonl; the row id is in
the comment); none of them is in signatures.yaml, so what decides is the mechanism under
test: a word family (keywords.yaml), the reading of a pasted traceback, a C++ exception.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servepilot.triage import triage_text
from servepilot.triage.keywords import guess_category

WORDS = [
    # a GPU runtime library that cannot load (llama.cpp-7822-cuda_driver_arch)
    ("/server: error while loading shared libraries: libcuda.so.1: cannot open shared object file: "
     "No such file or directory", "cuda_driver_arch"),
    # a runtime that sees no device (ramalama-2447-cuda_driver_arch)
    ("ggml_cuda_init: failed to initialize ROCm: no ROCm-capable device is detected", "cuda_driver_arch"),
    # CUDA's error 999 after a suspend (ollama-6647-cuda_driver_arch)
    ("cudaSetDevice err: 999", "cuda_driver_arch"),
    # rocBLAS kernels missing for the card's gfx target (sglang-4421-cuda_driver_arch)
    ("Docker run lmsysorg/sglang:v0.4.4.post1-rocm630 Error: no TensileLibrary_lazy_gfx90a.dat file.",
     "cuda_driver_arch"),
    # ptxas refusing an instruction for the target (sglang-8879-cuda_driver_arch)
    ("ptxas /tmp/tmpkz2cup6g.ptx, line 606; error   : Feature '.tile::gather4 with destination state "
     "space as .shared::cluster' not supported on .target 'sm_120a'", "cuda_driver_arch"),
    # Vulkan cannot enumerate devices (gpt4all-1990-cuda_driver_arch)
    ("ggml_vk_available_devices_internal: ignoring Vulkan exception: "
     "vk::Instance::enumeratePhysicalDevices: ErrorInitializationFailed", "cuda_driver_arch"),
    # ollama's RAM pre-check (ollama-10920-oom_weights)
    ("Error: model requires more system memory (164.8 GiB) than is available (13.4 GiB)", "oom_weights"),
    # Metal's largest buffer (llama.cpp-1815-oom_weights)
    ("ggml_metal_add_buffer: buffer 'data' size 18300780544 is larger than buffer maximum of 17179869184",
     "oom_weights"),
    # llama.cpp's context creation: compute buffers, not weights (llama.cpp-14752, BodhiApp-4)
    ("graph_reserve: failed to allocate compute buffers", "oom_kv_cache"),
    ("ggml_gallocr_reserve_n: failed to allocate Metal buffer of size 8891928576", "oom_kv_cache"),
    # Go's listener on Windows, English and localised (ollama-9960, ollama-8261)
    ("Error: listen tcp 0.0.0.0:11434: bind: Only one usage of each socket address "
     "(protocol/network address/port) is normally permitted.", "port_in_use"),
    ("Error: listen tcp 127.0.0.1:11434: bind: Normal olarak her yuva adresi için yalnızca bir kullanıma "
     "izin veriliyor.", "port_in_use"),
    # SGLang waiting for its metrics port (gpustack-5842-port_in_use)
    ("ValueError: metrics_port at 40290 is not available in 30 seconds. metrics_port is used by a process "
     "already.", "port_in_use"),
    # a compiled extension built against another torch/CUDA (sglang-8373-cuda_driver_arch)
    ("ImportError: /home/devuser/.local/lib/python3.10/site-packages/sgl_kernel/common_ops.abi3.so: "
     "undefined symbol: _ZN3c104cuda9SetDeviceEa", "cuda_driver_arch"),
    # PTX newer than the driver (llama.cpp-5845-cuda_driver_arch)
    ("CUDA error: the provided PTX was compiled with an unsupported toolchain.", "cuda_driver_arch"),
    # transformers' AutoConfig on a config without a model_type it knows
    # (transformers/models/auto/configuration_auto.py: "Unrecognized model in ...")
    ("ValueError: Unrecognized model in /models/x. Should have a `model_type` key in its config.json",
     "unsupported_arch"),
    # weight/activation bit notation (vllm-30602-quantization_support)
    ("ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons:",
     "quantization_support"),
    # the NVIDIA container runtime's driver gate (vllm-5635-cuda_driver_arch)
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver "
     "to a newer version, or use an earlier cuda container: unknown.", "cuda_driver_arch"),
    # an FP4 KV cache (full-jethac-sglang-spark-nvfp4-kv-uncalibrated)
    ("NVFP4 KV cache global scales must be calibrated before CUDA graph capture.", "kv_cache_dtype"),
    # NVSHMEM, DeepEP's transport (sglang-6017, mooncake-605)
    ("nvshmem initialization failed, exiting", "nccl_distributed"),
    # a FlashAttention source path in a CUDA error (sglang-10711-attention_backend)
    ("`CUDA error (/sgl-kernel/build/_deps/repo-flash-attention-src/hopper/flash_fwd_launch_template.h:190): "
     "invalid argument`.", "attention_backend"),
]


@pytest.mark.parametrize("message, category", WORDS, ids=[w[0][:40] for w in WORDS])
def test_an_unknown_message_is_filed_by_the_words_of_its_failure(message, category):
    guess = guess_category(message)
    assert guess is not None and guess[0] == category, guess


def test_words_that_only_name_a_library_path_do_not_decide():
    # jan-4971-other: a missing engine DLL whose *path* says cuda; not a CUDA failure
    line = ('Could not load library "D:\\Jan\\engines\\cortex.llamacpp\\windows-amd64-avx2-cuda-12-0\\v0.1.55'
            '/engine.dll" The specified module could not be found.')
    assert guess_category(line) is None


def test_a_code_line_cut_from_its_frame_is_not_the_error():
    # llama-cpp-python-1169: docker's timestamps ahead of a traceback pasted in a code fence
    log = (
        '`File "/home/worker/app/.venv/lib/python3.11/site-packages/llama_cpp/llama_cpp.py", line 76, '
        "in _load_shared_library\n"
        "2024-02-09 17:32:34     raise RuntimeError(f\"Failed to load shared library '{_lib_path}': {e}\")\n"
        "2024-02-09 17:32:34 RuntimeError: Failed to load shared library '/app/llama_cpp/libllama.so': "
        "libcuda.so.1: cannot open shared object file: No such file or directory`\n"
    )
    d = triage_text(log)
    assert d.root_cause.line == 3
    assert d.root_cause.exception == "RuntimeError"
    assert d.root_cause.category == "cuda_driver_arch"


def test_a_cpp_exception_rests_on_its_what_line_and_is_named_by_its_type():
    # ramalama-1585-cuda_driver_arch: the SYCL build finds no GPU platform
    log = (
        "main: loading model\n"
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  can not find preferred GPU platform\n"
    )
    d = triage_text(log, engine="llama.cpp")
    assert d.root_cause.line == 3
    assert d.root_cause.exception == "std::runtime_error"
    assert d.root_cause.message == "can not find preferred GPU platform"
    assert d.root_cause.category == "cuda_driver_arch"


_FULL = Path(__file__).resolve().parents[2] / "corpus" / "full-logs"


def _first_line_with(log: str, needle: str) -> int:
    return next(i for i, line in enumerate(log.split("\n"), 1) if needle in line)


def test_an_exception_outranks_an_earlier_line_that_only_says_failed():
    # SGLang on ROCm prints "Failed to get device capability: nvcc not found ..." and goes on;
    # the scheduler then dies of a KeyError (corpus row full-mattbucci-sglang-r9700-reap-awq-keyerror)
    log = (_FULL / "mattbucci-sglang-r9700-reap-awq-keyerror.log").read_bytes().decode("utf-8", "replace")
    d = triage_text(log)
    assert d.root_cause.exception == "KeyError"
    assert d.root_cause.line == _first_line_with(log, "KeyError: 'model.layers.0.mlp.experts.w2_qweight'")


def test_a_known_cause_rests_on_its_error_line_not_on_an_earlier_progress_line():
    # vLLM's INFO "Available KV cache memory: -1.66 GiB", then the ValueError it leads to
    # (corpus row full-mrpid12org-vllm-llava-next-video-no-kv)
    log = (_FULL / "mrpid12org-vllm-llava-next-video-no-kv.log").read_bytes().decode("utf-8", "replace")
    d = triage_text(log)
    assert d.root_cause.category == "oom_kv_cache"
    assert d.root_cause.line == _first_line_with(log, "ValueError: No available memory for the cache blocks")


def test_a_quoted_model_path_does_not_lend_its_words_to_the_category():
    # full-mattbucci-sglang-r9700-model-path: "AWQ" in the model's path is no quantization error
    line = ("OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
            "'/home/letsrtfm/AI/models/Devstral-24B-AWQ-4bit-calibrated'. Use `repo_type` argument if needed.")
    assert guess_category(line) is None
    # the same words outside a quoted name still count
    assert guess_category("ValueError: AWQ is not supported on this GPU")[0] == "quantization_support"


def test_a_retry_after_a_refused_command_line_is_the_launch_diagnosed():
    # a deployment script's first start dies in argparse, its retry (without the flags) then
    # fails to bind the port (corpus row full-jerrymousez-vllm-tp4-port)
    log = (_FULL / "jerrymousez-vllm-tp4-port.log").read_bytes().decode("utf-8", "replace")
    d = triage_text(log)
    assert d.launches == 2 and d.stale
    assert d.root_cause.category == "port_in_use"
    assert d.root_cause.line == _first_line_with(log, "OSError: [Errno 98] Address already in use")


@pytest.mark.parametrize("line", [
    # sglang-4205-nccl_distributed
    "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection cl",
    # sglang-5883-nccl_distributed
    "Exception: Capture cuda graph failed: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:133] "
    "Timed out waiting 1800000ms for send operation to complete",
])
def test_a_phase_wrapper_around_an_unknown_message_takes_the_category_its_words_name(line):
    d = triage_text(line, engine="sglang")
    assert d.root_cause.signature == "sglang-capture-failed"
    assert d.root_cause.category == "nccl_distributed"


def test_a_phase_wrapper_whose_message_names_nothing_keeps_its_phase():
    # the signature's own example (sglang/srt/model_executor/cuda_graph_runner.py@v0.4.3)
    d = triage_text("Exception: Capture cuda graph failed: Ninja build failed.", engine="sglang")
    assert d.root_cause.category == "cuda_graph"


def test_an_unknown_multimodal_projector_is_an_unsupported_architecture():
    # ollama-16706-unsupported_arch: the loader wraps it in "failed to load model"
    line = ("clip_init: failed to load model 'G:\\AI\\OllamaModels\\blobs\\sha256-0216a6': "
            "load_hparams: unknown projector type: locateanything")
    d = triage_text(line, engine="llama.cpp")
    assert d.root_cause.category == "unsupported_arch"


@pytest.mark.parametrize("log, rests_on, category", [
    # ollama-6238-oom_weights: the client's request dies with the runner
    ('Error: Post "http://127.0.0.1:11434/api/chat": EOF\n'
     "Error: llama runner process has terminated: signal: killed\n",
     "Error: llama runner process has terminated: signal: killed", "oom_weights"),
    # ollama-9960-port_in_use: the CLI points at the server log, which says why
    ("Error: something went wrong, please see the ollama server logs for details\n"
     "Error: listen tcp 0.0.0.0:11434: bind: Only one usage of each socket address "
     "(protocol/network address/port) is normally permitted.\n",
     "Error: listen tcp 0.0.0.0:11434: bind: Only one usage", "port_in_use"),
])
def test_a_line_that_points_at_another_failure_is_not_the_root_cause(log, rests_on, category):
    d = triage_text(log)
    assert log.split("\n")[d.root_cause.line - 1].startswith(rests_on)
    assert d.root_cause.category == category


def test_the_line_closing_a_traceback_is_its_exception_whatever_the_class_is_called():
    # ktransformers-1570-attention_backend: Triton's OutOfResources (no "Error" in the name),
    # raised from SGLang's Triton extend-attention kernel
    log = (
        '  File "/home/u/.venv/lib/python3.11/site-packages/sglang/srt/layers/attention/triton_ops/'
        'extend_attention.py", line 597, in extend_attention_fwd\n'
        "    _fwd_kernel[grid](\n"
        '  File "/home/u/.venv/lib/python3.11/site-packages/triton/compiler/compiler.py", line 483, '
        "in _init_handles\n"
        '    raise OutOfResources(self.metadata.shared, max_shared, "shared memory")\n'
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 106496, "
        "Hardware limit: 101376. Reducing block sizes or\n"
    )
    d = triage_text(log)
    assert d.root_cause.exception == "triton.runtime.errors.OutOfResources"
    assert d.root_cause.line == 5
    # the frames place the kernel in the attention backend
    assert d.root_cause.category == "attention_backend"


def test_a_refused_command_line_is_not_filed_under_the_flag_it_names():
    # llama-swap-283-other: --flash-attn took the next flag as its value
    line = ("llama-swap-1  | error while handling argument \"--flash-attn\": error: unkown value for "
            "--flash-attn: '--ctx-size'")
    assert guess_category(line)[0] == "other"
    d = triage_text(line, engine="llama.cpp")
    assert d.root_cause.category == "other"


def test_an_unknown_memory_failure_means_what_its_phase_says():
    # lines of llamafile-501: the context (KV cache, compute buffers) was being created
    alloc = "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 84940832\n"
    in_context = "llama_new_context_with_model:        CPU  output buffer size =     0.14 MiB\n" + alloc
    assert triage_text(in_context, engine="llama.cpp").root_cause.category == "oom_kv_cache"
    # the same line with no phase shown reads as the weights'
    assert triage_text(alloc, engine="llama.cpp").root_cause.category == "oom_weights"


def test_a_bare_assertion_is_read_by_the_assert_it_failed():
    # sglang-2270-quantization_support: an AWQ MoE checkpoint with no MoE quant method
    log = (
        "    self.experts = FusedMoE(\n"
        '  File "/home/.local/lib/python3.10/site-packages/sglang/srt/layers/fused_moe_triton/layer.py", '
        "line 227, in __init__\n"
        "    assert self.quant_method is not None\n"
        "AssertionError\n"
    )
    d = triage_text(log, engine="sglang")
    assert d.root_cause.exception == "AssertionError"
    assert d.root_cause.category == "quantization_support"


@pytest.mark.parametrize("message, category", [
    # full-parallelworks-vllm-gptoss-tiktoken-split
    ("openai_harmony.HarmonyError: invalid tiktoken vocab file: expected token and rank, could not split "
     "on ' ' at line 1", "tokenizer_template"),
    # full-mattbucci-sglang-r9700-reap-awq-keyerror: a packed AWQ tensor the MoE loader has no place for
    ("KeyError: 'model.layers.0.mlp.experts.w2_qweight'", "quantization_support"),
])
def test_words_of_tokenizer_files_and_packed_quantized_tensors(message, category):
    assert guess_category(message)[0] == category


def test_a_run_of_unknown_lines_rests_on_the_line_that_says_what_failed():
    # llama.cpp-18133-cuda_driver_arch: GGML_ABORT's location line, then CANN's own words
    log = (
        "srv    load_model: loading model '/home/model/deepseek-7b-chat-f16.gguf'\n"
        "/usr/local/llama.cpp/ggml/src/ggml-cann/ggml-cann.cpp:67: CANN error\n"
        "CANN error: EZ9903: [PID: 71888] 2025-12-17-18:13:01.238.630 support for Ascend910 is not implemented\n"
    )
    d = triage_text(log, engine="llama.cpp")
    assert d.root_cause.line == 3
    assert d.root_cause.category == "cuda_driver_arch"


def test_an_engine_process_that_dies_after_readiness_is_the_root_cause():
    # SGLang served, then its scheduler died of a FlashInfer error on the warmup request; the
    # traceback unwound run_scheduler_process (corpus row full-jethac-sglang-spark-flashinfer-invalid-config)
    log = (_FULL / "jethac-sglang-spark-flashinfer-invalid-config.log").read_bytes().decode("utf-8", "replace")
    d = triage_text(log)
    assert d.root_cause is not None
    assert d.root_cause.exception == "tvm.error.InternalError"
    assert d.root_cause.line == _first_line_with(log, "tvm.error.InternalError: Error in function")


@pytest.mark.parametrize("raw, process, level, message", [
    # vLLM 0.8-0.10 multiproc workers (corpus excerpts carry "(VllmWorker rank=3 pid=1090)")
    ("(VllmWorker rank=3 pid=1090) ERROR 06-01 10:00:00 [multiproc_executor.py:470] ValueError: x",
     "VllmWorker rank=3", "ERROR", "ValueError: x"),
    # torch's glog-format lines inside vLLM's process prefix (full-zjpzhao-verify-qwen3vl-flex)
    ("\x1b[1;36m(EngineCore_DP0 pid=116603)\x1b[0;0m [rank0]:E0731 16:03:52.115000 116603 "
     "site-packages/torch/_inductor/runtime/triton_heuristics.py:539] [1/0] RuntimeError: PassManager::run failed",
     "EngineCore_DP0", "ERROR", "RuntimeError: PassManager::run failed"),
    # c10's bracketed form, a warning (full-jethac-sglang-spark-flashinfer-invalid-config)
    ("[rank0]:[W613 18:25:21.887897693 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() "
     "was not called before program exit", "rank0", "WARNING", "Warning: WARNING: destroy_process_group()"),
    # Ray Serve's replica prefix around vLLM's own format (KubeRay / Ray Serve deployments)
    ("(ServeReplica:default:VLLMDeployment pid=3262, ip=10.0.0.1) ERROR 08-01 10:00:00 [core.py:1] "
     "ValueError: x", "ServeReplica:default:VLLMDeployment", "ERROR", "ValueError: x"),
    # Xinference's logging format (logger name and pid before the level)
    ("2024-11-29 05:23:47,651 xinference.core.worker 140 ERROR    Failed to load model",
     None, "ERROR", "Failed to load model"),
    # loguru
    ("2025-06-01 10:00:00.123 | ERROR    | module:fn:12 - ValueError: x", None, "ERROR", "ValueError: x"),
    ("[ERROR] ValueError: x", None, "ERROR", "ValueError: x"),
])
def test_engine_and_torch_prefixes_are_taken_off_the_message(raw, process, level, message):
    from servepilot.triage.lines import parse_line

    ll = parse_line(raw)
    assert (ll.process, ll.level) == (process, level)
    assert ll.message.startswith(message)


_WATCHDOG = (
    "(VllmWorker TP1 pid=12) [rank1]:[E801 10:10:00.123456789 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600011 milliseconds before timing out.\n"
)
_PEER_OOM = (
    "(VllmWorker TP3 pid=14) ERROR 08-01 10:00:05 [multiproc_executor.py:546] Traceback (most recent call last):\n"
    '(VllmWorker TP3 pid=14) ERROR 08-01 10:00:05 [multiproc_executor.py:546]   File "/x/vllm/v1/worker/'
    'gpu_model_runner.py", line 10, in load_model\n'
    "(VllmWorker TP3 pid=14) ERROR 08-01 10:00:05 [multiproc_executor.py:546] torch.OutOfMemoryError: CUDA out "
    "of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.1 GiB of which 1.0 GiB is free.\n"
)


def test_a_watchdog_timeout_is_explained_by_the_peer_that_failed_first():
    # the watchdog line is flushed first in the file but happened ten minutes after the OOM
    log = "INFO 08-01 10:00:00 [api_server.py:1] vLLM API server version 0.10.1\n" + _WATCHDOG + _PEER_OOM
    d = triage_text(log, engine="vllm")
    assert d.root_cause.signature == "cuda-oom"
    assert d.root_cause.process == "VllmWorker TP3"
    assert any(a.signature == "nccl-timeout" for a in d.alternatives)


def test_a_watchdog_timeout_alone_is_the_root_cause():
    d = triage_text("INFO 08-01 10:00:00 [api_server.py:1] vLLM API server version 0.10.1\n" + _WATCHDOG,
                    engine="vllm")
    assert d.root_cause.signature == "nccl-timeout"


def test_a_c_function_refusal_is_an_error_line_and_outranks_the_loader_echo():
    # llama.cpp-3492-other: an old GGML file given to a GGUF build
    log = (
        "main: seed  = 1696541774\n"
        "gguf_init_from_file: invalid magic number 67676a74\n"
        "error loading model: llama_model_loader: failed to load model from "
        "/var/www/html/models/7B/alpaca/ggml-model-q8_0.bin\n"
    )
    d = triage_text(log, engine="llama.cpp")
    assert d.root_cause.line == 2
