"""Device runtimes' own status codes (runtime_errors.yaml, runtime_status.py): an error no
signature knows is placed by the status its runtime returned. Each line below is one a runtime
or its wrapper prints (source named beside it); each has a neighbour that must decide the
other way: a status that names no part of a launch, a number in no runtime's form."""

import pytest

from servepilot.categories import CATEGORIES
from servepilot.triage import triage_text
from servepilot.triage.runtime_status import (
    RuntimeDataError,
    load_runtime_table,
    parse_runtime_table,
    read_status,
)


def test_every_status_has_a_source_and_a_contract_category():
    table = load_runtime_table()
    assert len(table.by_name) > 50
    for status in table.by_name.values():
        assert "@" in status.source, status
        assert status.category in CATEGORIES


def _doc(meaning="out_of_memory", form=r"code (?P<code>\d+)"):
    return {
        "meanings": {"out_of_memory": {"category": "oom_weights", "why": "x"}},
        "runtimes": [{"runtime": "r", "source": "r.h@1", "numbers": [form],
                      "codes": [{"name": "R_OOM", "code": 2, "meaning": meaning}]}],
    }


def test_a_malformed_table_is_refused():
    assert parse_runtime_table(_doc()).by_name["R_OOM"].category == "oom_weights"
    with pytest.raises(RuntimeDataError, match="unknown meaning"):
        parse_runtime_table(_doc(meaning="melted"))
    with pytest.raises(RuntimeDataError, match="code"):
        parse_runtime_table(_doc(form=r"code \d+"))


@pytest.mark.parametrize(
    ("line", "name", "meaning"),
    [
        # torch_memory_saver's cuMem* check (its 0.0.10 wheel: "CUresult error: "; earlier
        # releases "result=N"): CUresult 2 is CUDA_ERROR_OUT_OF_MEMORY (cuda.h@13.0)
        ("[torch_memory_saver.cpp] CUresult error  result=2 file=csrc/torch_memory_saver.cpp "
         "func=cu_mem_create line=103", "CUDA_ERROR_OUT_OF_MEMORY", "out_of_memory"),
        # torch's device count (c10/cuda/CUDAFunctions.cpp, torch 2.14.1 libc10_cuda.so)
        ("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you "
         "run some cuda functions before calling NumCudaDevices() that might have already set an "
         "error? Error 804: forward compatibility was attempted on non supported HW",
         "cudaErrorCompatNotSupportedOnDevice", "driver_mismatch"),
        ("hipErrorNoBinaryForGpu: Unable to find code object for all current devices!",
         "hipErrorNoBinaryForGpu", "no_binary"),
        ("RuntimeError: level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)",
         "UR_RESULT_ERROR_DEVICE_LOST", "device_lost"),
        ("zeMemAllocDevice returned ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
         "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY", "out_of_memory"),
        ("Native API failed. Native API returns: -5 (PI_ERROR_OUT_OF_RESOURCES)",
         "CL_OUT_OF_RESOURCES", "out_of_memory"),
        # Vulkan-Hpp's to_string name after the call (vulkan_to_string.hpp@v1.4.359)
        ("llama_model_load: error loading model: vk::PhysicalDevice::createDevice: "
         "ErrorExtensionNotPresent", "VK_ERROR_EXTENSION_NOT_PRESENT", "missing_feature"),
        ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent "
         "error. Ran out of memory in memory space hbm.", "RESOURCE_EXHAUSTED", "out_of_memory"),
        # torch_npu's NPU_CHECK_ERROR (NPUException.h@2.5.1); 207018 per its NPUErrorCodes.h
        ("RuntimeError: malloc:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:423 NPU function "
         "error: aclrtMallocAlign32, error code is 207018", "code 207018", "out_of_memory"),
        ("RuntimeError: init:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:1 NPU function "
         "error: aclrtSetDevice(device_id_), error code is 507033", "ACL_ERROR_RT_DEV_SETUP_ERROR",
         "no_device"),
    ],
)
def test_a_runtime_status_is_read_with_its_meaning(line, name, meaning):
    status = read_status(line)
    assert status is not None and (status.name, status.meaning) == (name, meaning)


@pytest.mark.parametrize(
    "line",
    [
        # a kernel fault or a bad argument names no part of a launch: left out on purpose
        "[torch_memory_saver.cpp] CUresult error  result=700 file=x.cpp func=cu_mem_map",
        "[62617] level_zero backend failed with error: 4 (UR_RESULT_ERROR_INVALID_VALUE)",
        "RuntimeError: copy_d2d:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:90 NPU function "
        "error: call aclnnInplaceCopy failed, error code is 161002",
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Mosaic failed to compile TPU kernel",
        # a number in no runtime's form, a name inside a longer identifier, prose
        "Error 804: the request failed",
        "the error code is 207018 in our ticket",
        "hipErrorNoBinaryForGpuX",
        "the device was lost, resources exhausted",
    ],
)
def test_a_status_without_a_meaning_or_a_number_in_no_form_is_not_read(line):
    assert read_status(line) is None


def _worker(line: str) -> str:
    return (
        "(VllmWorker rank=0 pid=7) ERROR 01-01 00:00:00 [multiproc_executor.py:1] Traceback (most "
        "recent call last):\n"
        '(VllmWorker rank=0 pid=7) ERROR 01-01 00:00:00 [multiproc_executor.py:1]   File '
        '"/usr/lib/python3.12/site-packages/vllm/distributed/parallel_state.py", line 9, in f\n'
        f"(VllmWorker rank=0 pid=7) ERROR 01-01 00:00:00 [multiproc_executor.py:1] {line}\n"
    )


def test_an_xpu_device_lost_is_the_driver_stack_not_the_frames_part():
    rc = triage_text(_worker(
        "RuntimeError: level_zero backend failed with error: 20 (UR_RESULT_ERROR_DEVICE_LOST)"
    )).root_cause
    assert (rc.category, rc.basis) == ("cuda_driver_arch", "runtime-status")
    assert "ur_api.h@" in rc.explanation
    # the neighbour: an invalid value from the same backend is no device failure
    rc = triage_text(_worker(
        "RuntimeError: level_zero backend failed with error: 4 (UR_RESULT_ERROR_INVALID_VALUE)"
    )).root_cause
    assert rc.basis != "runtime-status"


def test_a_curesult_out_of_memory_outranks_where_it_was_raised():
    # raised in vLLM's parallel_state (a nccl_distributed frame) with "ray" in its words: the
    # runtime's status says what happened, where it surfaced does not
    rc = triage_text(_worker(
        "RuntimeError: [torch_memory_saver.cpp] CUresult error  result=2 file=csrc/"
        "torch_memory_saver.cpp func=cu_mem_create line=103 (ray actor)"
    )).root_cause
    assert (rc.category, rc.basis) == ("oom_weights", "runtime-status")
    # the neighbour: CUresult 700 (an illegal address) names no part of the launch
    rc = triage_text(_worker(
        "RuntimeError: [torch_memory_saver.cpp] CUresult error  result=700 file=csrc/"
        "torch_memory_saver.cpp func=cu_mem_create line=103 (ray actor)"
    )).root_cause
    assert (rc.category, rc.basis) == ("nccl_distributed", "frames")


def test_an_out_of_memory_status_takes_the_kv_cache_when_the_words_name_it():
    rc = triage_text(_worker(
        "RuntimeError: failed to allocate the KV cache: ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"
    )).root_cause
    assert (rc.category, rc.basis) == ("oom_kv_cache", "runtime-status")


def test_an_ascend_npu_error_code_is_read_by_its_number():
    npu = ("RuntimeError: malloc:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:423 NPU "
           "function error: aclrtMallocAlign32, error code is {}")
    assert triage_text(_worker(npu.format(207018))).root_cause.category == "oom_weights"
    assert triage_text(_worker(npu.format(507008))).root_cause.category == "cuda_driver_arch"
    assert triage_text(_worker(npu.format(161002))).root_cause.basis != "runtime-status"


def test_a_signature_answer_stays_first():
    # ggml-vulkan's allocation failure is a known message (signatures.yaml); the status name
    # printed beside it does not replace the signature's answer
    rc = triage_text(
        "ggml_vulkan: Device memory allocation of size 369827840 failed.\n"
        "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory\n"
    ).root_cause
    assert rc.signature is not None and rc.basis != "runtime-status"


@pytest.mark.parametrize(
    ("line", "name"),
    [
        # cudaGetErrorString's text after torch's "CUDA error: " (libcudart.so.13, CUDA 13.0)
        ("RuntimeError: CUDA error: initialization error", "cudaErrorInitializationError"),
        ("RuntimeError: CUDA driver error: CUDA driver is a stub library", "cudaErrorStubLibrary"),
        ("RuntimeError: Triton Error [CUDA]: device kernel image is invalid",
         "cudaErrorInvalidKernelImage"),
        # ggml-cuda's start (ggml/src/ggml-cuda/ggml-cuda.cu, llama-cpp-python 0.3.36)
        ("ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected",
         "cudaErrorNoDevice"),
    ],
)
def test_a_cuda_error_string_after_a_wrappers_words_is_its_status(line, name):
    status = read_status(line)
    assert status is not None and status.name == name
    # the neighbour: the same words without a CUDA error's prefix are anybody's
    assert read_status(line.split(": ", 2)[-1].replace("CUDA", "engine")) is None


def test_a_cuda_error_string_places_the_vague_cuda_error_signature():
    # "CUDA error: ..." is a known but vague message (category other); its runtime text says
    # the driver could not initialise
    rc = triage_text(_worker("RuntimeError: CUDA error: initialization error")).root_cause
    assert rc.signature is not None
    assert (rc.category, rc.basis) == ("cuda_driver_arch", "runtime-status")


@pytest.mark.parametrize(
    "line",
    [
        # vllm-ascend's NPU worker imports torch_npu (vllm_ascend/worker/worker_v1.py@0.11.0)
        "AttributeError: module 'torch_npu' has no attribute 'npu_fused_infer_attention_score_v2'",
        # vLLM's XPU worker imports intel_extension_for_pytorch (vllm/worker/xpu_worker.py@v0.5.5)
        "ImportError: cannot import name 'ipex_ops' from 'intel_extension_for_pytorch.llm'",
        # vLLM's TPU worker imports torch_xla (vllm/v1/worker/tpu_worker.py@v0.11.0)
        "ModuleNotFoundError: No module named 'torch_xla.experimental.custom_kernel'",
    ],
)
def test_a_device_bridge_that_does_not_fit_is_the_device_stack(line):
    rc = triage_text(_worker(line)).root_cause
    assert (rc.category, rc.basis) == ("cuda_driver_arch", "runtime-status")


def test_another_packages_missing_name_is_no_device_stack():
    # the neighbour: the same words about a package that is no device bridge
    rc = triage_text(_worker(
        "AttributeError: module 'transformers_npu_utils' has no attribute 'npu_format_cast'"
    )).root_cause
    assert rc.basis != "runtime-status" and rc.category != "cuda_driver_arch"


@pytest.mark.parametrize(
    ("line", "category"),
    [
        # cuBLAS (cublas_api.h@13.1) and cuDNN (cudnn_graph.h@9.24) statuses
        ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
         "oom_weights"),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", "cuda_driver_arch"),
        # jax/_src/xla_bridge.py@jax 0.4.38
        ("RuntimeError: Unable to initialize backend 'tpu': INTERNAL: Failed to get global TPU "
         "topology. (set JAX_PLATFORMS='' to automatically choose an available backend)",
         "cuda_driver_arch"),
        # torch/xpu/__init__.py@torch 2.14.1
        ("AssertionError: Torch not compiled with XPU enabled", "cuda_driver_arch"),
    ],
)
def test_library_statuses_and_runtime_fronts_words(line, category):
    rc = triage_text(_worker(line)).root_cause
    assert (rc.category, rc.basis) == (category, "runtime-status")


def test_a_status_inside_a_runtime_fronts_words_says_more_than_they_do():
    # jax could not start its CUDA backend because memory ran out: the status decides
    rc = triage_text(_worker(
        "RuntimeError: Unable to initialize backend 'cuda': RESOURCE_EXHAUSTED: Out of memory "
        "while trying to allocate 75.0GiB"
    )).root_cause
    assert (rc.category, rc.basis) == ("oom_weights", "runtime-status")
    # the neighbour: CUBLAS_STATUS_NOT_INITIALIZED names no single cause and is not listed
    assert read_status("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate") is None


def test_a_rocm_kernels_unreachable_stub_is_no_code_for_this_gpu():
    # vLLM's skinny GEMM on an RDNA3 card: the kernel body outside gfx90a/gfx942 is
    # assert(false) (csrc/rocm/skinny_gemms.cu@v0.8.5); HIP prints it (hip_assert.h@7.1)
    stub = (
        "/app/vllm/build/temp.linux-x86_64-cpython-312/csrc/rocm/skinny_gemms.hip:497: void "
        "wvSplitK_hf_sml_(const int, const int, const scalar_t *) [scalar_t = __hip_bfloat16, "
        "THRDS = 64]: Device-side assertion `{}' failed.\n"
    )
    rc = triage_text(stub.format("false")).root_cause
    assert (rc.category, rc.basis) == ("cuda_driver_arch", "runtime-status")
    # the neighbour: an assert of a real condition is the kernel's own check
    assert read_status(stub.format("row < M")) is None


def test_a_sentence_naming_a_runtime_failure_status_is_an_error_line():
    # an issue title names the status with no other error word; a later reply says "error"
    title = "vLLM image 1.4: TP=2 fails with {} during determine_available_memory on two B50s\n"
    reply = "Tried 0.65 - Same error, unfortunately.\n"
    rc = triage_text(title.format("UR_RESULT_ERROR_DEVICE_LOST") + reply).root_cause
    assert rc.line == 1 and (rc.category, rc.basis) == ("cuda_driver_arch", "runtime-status")
    # the neighbours: a success status is no failure, nor is an environment variable whose
    # name holds ERROR, so the reply's line is all there is
    for name in ("ZE_RESULT_SUCCESS", "NCCL_ASYNC_ERROR_HANDLING=1"):
        assert triage_text(title.format(name) + reply).root_cause.line == 2


def test_an_out_of_memory_status_is_placed_by_the_phase_it_came_in():
    # vLLM's "Model loading took ..." (gpu_model_runner.py@v0.12.0) opens the KV cache sizing;
    # a runtime's out-of-memory status after it is the KV cache's, as CUDA's own OOM is
    loaded = "INFO 01-01 00:00:00 [gpu_model_runner.py:1] Model loading took 14.2 GiB\n"
    oom = _worker("RuntimeError: level_zero backend failed with error: 39 "
                  "(UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)")
    rc = triage_text(loaded + oom).root_cause
    assert (rc.category, rc.basis) == ("oom_kv_cache", "runtime-status")
    # the neighbour: with no phase shown, it is the weights'
    assert triage_text(oom).root_cause.category == "oom_weights"
