"""Issue 13, round-seven misses: the llama.cpp family's ways of saying a GPU backend cannot run
(a library that does not load, no device, no code for the device), ROCm and SYCL libraries
without code for the GPU, vLLM's model-class refusals, SGLang's device and memory checks, and a
compiler assertion that is a bug rather than a missing GPU feature. Each log is built from lines
the programs print (the source is said beside each); where a mechanism could be over-read, a
neighbour shows it deciding the other way."""

from __future__ import annotations

import pytest

from servepilot.triage import triage_text

# llama.cpp's context creation after a failed allocation (llama-cpp-python 0.3.36 vendored
# llama.cpp: src/llama-context.cpp graph_reserve, common/common.cpp common_init_from_params)
CONTEXT_AFTER_ALLOCATION = (
    "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 3060) - 11800 MiB "
    "free\n"
    "graph_reserve: failed to allocate compute buffers\n"
    "llama_init_from_model: failed to initialize the context: failed to allocate compute pp "
    "buffers\n"
    "common_init_from_params: failed to create context with model '/models/m.gguf'\n"
    "srv    load_model: failed to load model, '/models/m.gguf'\n"
)


def test_a_failed_context_rests_on_the_allocation_line_before_it():
    d = triage_text(CONTEXT_AFTER_ALLOCATION)
    assert d.root_cause.category == "oom_kv_cache"
    assert d.root_cause.line == 2  # the allocation, not its report


def test_ollama_retelling_a_failed_context_is_the_context_memory():
    # ollama's client line carries the runner's last error line (llm/server.go LastErrMsg)
    d = triage_text(
        "Error: llama runner process has terminated: signal: aborted (core dumped) "
        "error:failed to create context with model '/root/.ollama/models/blobs/sha256-e84ed7'\n"
    )
    assert d.root_cause.signature == "llamacpp-context-create-failed"
    assert d.root_cause.category == "oom_kv_cache"


def test_a_failed_context_after_a_v_cache_refusal_is_the_kv_dtype():
    # neighbour: the earlier line names another cause (src/llama-context.cpp: a quantized V
    # cache needs flash attention), and it stays the cause
    d = triage_text(
        "llama_init_from_model: V cache quantization requires flash_attn\n"
        "common_init_from_params: failed to create context with model 'm.gguf'\n"
    )
    assert d.root_cause.category == "kv_cache_dtype"
    assert d.root_cause.line == 1


@pytest.mark.parametrize(
    ("log", "signature"),
    [
        # CPython ctypes on Windows (Modules/_ctypes/callproc.c): the DLL is in the wheel, a
        # dependency (the CUDA runtime) is not
        (
            "FileNotFoundError: Could not find module 'C:\\Python311\\Lib\\site-packages\\llama_cpp"
            "\\lib\\ggml.dll' (or one of its dependencies). Try using the full path with "
            "constructor syntax.",
            "llamacpp-backend-library-load-failed",
        ),
        # llama-cpp-python llama_cpp/_ctypes_extensions.py@v0.3.36 load_shared_library
        (
            "RuntimeError: Failed to load shared library '/venv/lib/python3.11/site-packages/"
            "llama_cpp/lib/libggml-cuda.so': libcudart.so.12: cannot open shared object file: "
            "No such file or directory",
            "llamacpp-backend-library-load-failed",
        ),
        # ggml/src/ggml-backend-reg.cpp@v0.3.36 load_backend
        (
            "load_backend: failed to load /usr/lib/ollama/libggml-cuda.so: libcublas.so.12: "
            "cannot open shared object file: No such file or directory",
            "llamacpp-backend-library-load-failed",
        ),
        # src/llama.cpp@v0.3.36: main_gpu checked against the devices the backends registered
        (
            "llama_prepare_model_devices: invalid value for main_gpu: 0 (available devices: 0)\n"
            "llama_model_load_from_file_impl: failed to load model",
            "no-cuda-gpu",
        ),
        # sglang/srt/utils.py@v0.4.10.post2 get_device
        ("RuntimeError: No accelerator (CUDA, XPU, HPU) is available.", "no-cuda-gpu"),
        (
            "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is "
            "available.",
            "no-cuda-gpu",
        ),
        # rocBLAS without a Tensile library for the gfx target
        (
            "rocBLAS error: Could not initialize Tensile host: No devices found",
            "gpu-library-lacks-device-target",
        ),
        (
            "rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: "
            "Illegal seek for GPU arch : gfx1032",
            "gpu-library-lacks-device-target",
        ),
        # ggml-cuda common.cuh@v0.3.36 NO_DEVICE_CODE
        (
            "ggml-cuda/mmq.cuh:2946: ERROR: CUDA kernel mul_mat_q has no device code compatible "
            "with CUDA arch 600. ggml-cuda.cu was compiled for: 700,750,800",
            "cuda-no-kernel-image",
        ),
        (
            "Sycl: No kernel named _ZTSZZL17rms_norm_f32_ was found",
            "sycl-kernel-missing-for-device",
        ),
    ],
)
def test_a_gpu_backend_that_cannot_run_here_is_the_driver_or_arch(log, signature):
    d = triage_text(log + "\n")
    assert d.root_cause.category == "cuda_driver_arch"
    assert d.root_cause.signature == signature


def test_main_gpu_past_a_list_of_real_devices_is_not_a_missing_gpu():
    # neighbour: a main_gpu index past two present devices is a wrong flag, not a missing GPU
    d = triage_text(
        "llama_prepare_model_devices: invalid value for main_gpu: 3 (available devices: 2)\n"
    )
    assert d.root_cause is None or d.root_cause.signature != "no-cuda-gpu"


def test_a_missing_cuda_runtime_before_an_sglang_scheduler_exit_is_the_cause():
    # glibc's loader fails before Python runs; sglang/srt/entrypoints/engine.py@v0.5.23
    # _scheduler_died_error then reports the exit
    d = triage_text(
        "/venv/bin/python: error while loading shared libraries: libcudart.so.13: cannot open "
        "shared object file: No such file or directory\n"
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: 127). If exit code "
        "is -9 (SIGKILL), a common cause is the OS OOM killer.\n"
    )
    assert d.root_cause.category == "cuda_driver_arch"
    assert d.root_cause.line == 1


@pytest.mark.parametrize(
    ("log", "signature"),
    [
        # vllm/model_executor/models/minicpmv.py@v0.8.5 and @v0.10.2
        (
            "ValueError: Currently, MiniCPMV only supports versions 2.0, 2.5, and 2.6",
            "vllm-model-version-unsupported",
        ),
        # grok1.py@v0.19.0
        ("ValueError: Unsupported Grok version: 3", "vllm-model-version-unsupported"),
        # vllm/model_executor/model_loader/utils.py@v0.8.5 resolve_transformers_fallback
        (
            "ValueError: Qwen2_5OmniModel has no vLLM implementation and the Transformers "
            "implementation is not compatible with vLLM. Try setting VLLM_USE_V1=0.",
            "vllm-no-implementation",
        ),
        # transformers/models/auto/auto_factory.py@v4.45.2
        (
            "ValueError: Unrecognized configuration class <class 'transformers.models.siglip."
            "configuration_siglip.SiglipConfig'> for this kind of AutoModel: AutoModelForCausalLM.",
            "transformers-unknown-model-type",
        ),
        # GPT4All and Unsloth Studio retelling llama.cpp's refusal
        ('"Unsupported model architecture gemma3"', "llamacpp-unknown-arch"),
        (
            "(Original error: llama.cpp does not support this GGUF's model architecture "
            "('qwen4exp').",
            "llamacpp-unknown-arch",
        ),
        # src/llama.cpp@v0.3.2 create_tensor
        (
            "llama_model_load: error loading model: create_tensor: tensor 'blk.0.attn_qkv.weight' "
            "not found",
            "llamacpp-model-newer-than-build",
        ),
    ],
)
def test_a_model_the_build_does_not_know_is_unsupported_arch(log, signature):
    d = triage_text(log + "\n")
    assert d.root_cause.category == "unsupported_arch"
    assert d.root_cause.signature == signature


@pytest.mark.parametrize(
    ("feature", "category"),
    [
        ("--quantization bitsandbytes", "quantization_support"),
        ("--kv-cache-dtype", "kv_cache_dtype"),
        ("Compute Capability < 8.0", "cuda_driver_arch"),
        ("--num-scheduler-steps", "other"),
    ],
)
def test_vllm_v1_refusals_take_the_category_of_the_refused_flag(feature, category):
    # vllm/engine/arg_utils.py@v0.8.5 _raise_or_fallback
    d = triage_text(f"NotImplementedError: VLLM_USE_V1=1 is not supported with {feature}.\n")
    assert d.root_cause.signature == "vllm-v1-feature-refused"
    assert d.root_cause.category == category


def test_an_invalid_device_ordinal_is_more_ranks_than_gpus():
    # CUDA/HIP error 101 as torch reports it when a rank sets its local GPU
    d = triage_text(
        "[2025-10-18 03:12:09 TP7] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 612,'
        " in init_torch_distributed\n"
        "    torch.get_device_module(self.device).set_device(self.gpu_id)\n"
        "torch.AcceleratorError: HIP error: invalid device ordinal\n"
    )
    assert d.root_cause.signature == "gpu-ordinal-out-of-range"
    assert d.root_cause.category == "nccl_distributed"


def test_sglang_refusing_unbalanced_gpu_memory_is_memory_held_elsewhere():
    # sglang/srt/model_executor/model_runner.py@v0.4.10.post2 init_torch_distributed
    d = triage_text(
        "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other "
        "processes. min_per_gpu_memory=53.869140625, local_gpu_memory=187.810546875, "
        "local_gpu_memory * 0.9=169.0294921875\n"
    )
    assert d.root_cause.signature == "sglang-gpu-memory-unbalanced"
    assert d.root_cause.category == "oom_weights"


_PASS_MANAGER = (
    "[rank3]:E1128 09:51:39.357000 208 torch/_inductor/runtime/triton_heuristics.py:750] "
    "RuntimeError: PassManager::run failed\n"
)


def test_a_triton_compiler_assertion_is_a_compiler_bug():
    # glibc's __assert_fail text from Triton's AMD lowering, then the failed pass pipeline
    d = triage_text(
        "/app/triton/third_party/amd/lib/TritonAMDGPUDialectToLLVM/ScaledUpcastToLLVM.cpp:73: "
        "virtual llvm::LogicalResult {anonymous}::ScaledUpcastFp4Pattern::matchAndRewrite() "
        "const: Assertion `inputVals.size() % 4 == 0' failed.\n" + _PASS_MANAGER
    )
    assert d.root_cause.signature == "triton-compiler-assertion"
    assert d.root_cause.category == "other"
    assert d.root_cause.line == 1


def test_a_failed_pass_pipeline_without_an_assertion_stays_an_arch_gap():
    # neighbour: the pass pipeline failing on its own is the architecture reading
    d = triage_text(_PASS_MANAGER)
    assert d.root_cause.signature == "triton-passmanager-failed"
    assert d.root_cause.category == "cuda_driver_arch"


def test_a_rocm_memory_aperture_violation_is_a_kernel_fault_not_an_arch_gap():
    # the HSA runtime aborting a queue (ROCR-Runtime hsa.h code 0x29), as in an SGLang ROCm
    # CI log during CUDA-graph capture
    d = triage_text(
        ":0:rocdevice.cpp            :3675: 3715639811600 us:  Callback: Queue 0x7fb3c4200000 "
        "aborting with error : HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted "
        "to access memory beyond the largest legal address. code: 0x29\n"
    )
    assert d.root_cause.signature == "cuda-illegal-memory-access"
    assert d.root_cause.category == "other"


def test_an_npu_without_the_operators_kernel_binary_is_the_device_stack():
    # CANN's error block under vLLM's engine log (vllm-ascend on a 310P)
    d = triage_text(
        "ERROR 02-11 11:32:58 engine.py:389] call aclnnPromptFlashAttentionV3 failed, "
        "detail:EZ1001: PromptFlashAttention LaunchAicore failed.\n"
        "ERROR 02-11 11:32:58 engine.py:389]         Cannot find binary for op "
        "PromptFlashAttention.\n"
    )
    assert d.root_cause.signature == "cann-op-kernel-missing"
    assert d.root_cause.category == "cuda_driver_arch"


def _not_implemented(frame_file: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        f'  File "/usr/local/lib/python3.11/dist-packages/{frame_file}", line 214, in '
        "is_async_output_supported\n"
        "    raise NotImplementedError\n"
        "NotImplementedError\n"
    )


def test_a_platform_method_missing_on_vllms_fallback_platform_is_no_gpu_runtime():
    # vllm/platforms/interface.py@v0.8.5: UnspecifiedPlatform implements no Platform method
    d = triage_text(_not_implemented("vllm/platforms/interface.py"))
    assert d.root_cause.signature == "vllm-platform-method-missing"
    assert d.root_cause.category == "cuda_driver_arch"


def test_a_bare_not_implemented_error_elsewhere_stays_other():
    d = triage_text(_not_implemented("vllm/model_executor/models/foo.py"))
    assert d.root_cause.category == "other"


_SGLANG_CAPTURE_BEGIN = (
    "[2025-02-13 19:38:15 TP0] Memory pool end. avail mem=14.00 GB\n"
    "[2025-02-13 19:38:15 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
)


def test_an_offline_engine_log_that_finished_capture_is_no_stall():
    # SGLang's offline Engine prints no server readiness line; "Capture cuda graph end"
    # (sglang/srt/model_executor/model_runner.py@v0.4.5.post3) says the phase finished
    d = triage_text(
        _SGLANG_CAPTURE_BEGIN
        + "[2025-02-13 19:38:21 TP0] Capture cuda graph end. Time elapsed: 6.27 s\n"
        "[2025-02-13 19:38:21 TP0] max_total_num_tokens=910891, chunked_prefill_size=8192\n"
    )
    assert d.root_cause is None or d.root_cause.category != "cuda_graph"


def test_a_log_that_stops_inside_capture_is_still_a_capture_stall():
    d = triage_text(_SGLANG_CAPTURE_BEGIN)
    assert d.root_cause is not None
    assert d.root_cause.category == "cuda_graph"


def test_a_binding_whose_own_library_is_missing_is_a_broken_install():
    # neighbour of the GPU-runtime case: the missing file is llama.cpp's own library
    d = triage_text(
        "RuntimeError: Failed to load shared library '/venv/lib/python3.11/site-packages/"
        "llama_cpp/lib/libllama.so': libggml.so: cannot open shared object file: No such file or "
        "directory\n"
    )
    assert d.root_cause.signature == "llamacpp-backend-library-load-failed"
    assert d.root_cause.category == "other"
