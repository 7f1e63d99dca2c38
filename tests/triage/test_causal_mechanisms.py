"""Issue 13, mechanism over strings: what a process survived, where an error was raised, and
which error of several processes came first. Each log is built from lines the engines print
(the source of each is said beside it); each test shows the mechanism on a case it decides
both ways."""

from __future__ import annotations

import pytest

from servepilot.triage import triage_text

# The NGC container entrypoint's notice (an ERROR: line, then start-up goes on), as at the top
# of corpus/full-logs jethac sglang logs.
NGC_NOTICE = (
    "ERROR: This container was built for NVIDIA Driver Release 595.58 or later, but\n"
    "       version 580.159.03 was detected and compatibility mode is UNAVAILABLE.\n"
)
# SGLang's progress lines (sglang/srt/model_executor/model_runner.py@v0.5.9 load_model and
# init_memory_pool log these) and its scheduler's death (scheduler.py run_scheduler_process).
SGLANG_LOAD = "[2026-06-10 02:24:10] Load weight begin. avail mem=119.20 GB\n"
SGLANG_DEATH = (
    "[2026-06-10 02:25:10] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sglang/srt/managers/scheduler.py", line 4035, in run_scheduler_process\n'
    "    scheduler = Scheduler(\n"
    '  File "/sglang/srt/mem_cache/memory_pool.py", line 1129, in _create_buffers\n'
    "    torch.zeros(\n"
    "NotImplementedError: \"fill_cuda\" not implemented for 'Float4_e2m1fn_x2'\n"
    "\n"
    "[2026-06-10 02:25:10] Received sigquit from a child process. It usually means the child "
    "failed.\n"
)


def test_an_error_the_process_went_on_from_is_not_what_it_died_of():
    d = triage_text(NGC_NOTICE + SGLANG_LOAD + SGLANG_DEATH)
    assert d.root_cause.exception == "NotImplementedError"
    assert "Float4_e2m1fn_x2" in d.root_cause.message


def test_without_later_progress_the_first_error_still_comes_first():
    # the same notice with no start-up phase after it: nothing shows it was survived
    d = triage_text(NGC_NOTICE + SGLANG_DEATH)
    assert d.root_cause.line == 1


def test_another_process_going_on_does_not_mean_this_one_survived():
    # vLLM's worker prefix (vllm/v1/executor/multiproc_executor.py@v0.10.2); TP1 dies of its
    # error while TP0 goes on loading: TP1's error is the cause, not survived
    text = (
        "(Worker_TP1 pid=9) ERROR 01-01 00:00:01 [multiproc_executor.py:1] RuntimeError: CUDA "
        "driver "
        "initialization failed, you might not have a CUDA gpu.\n"
        "(Worker_TP0 pid=8) INFO 01-01 00:00:02 [default_loader.py:1] Loading weights took 3.1 "
        "seconds\n"
        "(Worker_TP0 pid=8) ERROR 01-01 00:00:03 [x.py:1] ValueError: something later\n"
    )
    assert triage_text(text).root_cause.line == 1


# An exception raised while a module was imported (vLLM's engine core importing flashinfer on
# Python 3.11, corpus/full-logs phivan): the attention package on the import path is no
# attention failure.
IMPORT_TIME = (
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1, in '
    "run_engine_core\n"
    "    engine_core = EngineCoreProc(*args, **kwargs)\n"
    '  File "/venv/lib/python3.11/site-packages/flashinfer/comm/__init__.py", line 4, in <module>\n'
    "    from .trtllm_ar import AllReduceFusionOp as AllReduceFusionOp\n"
    '  File "/venv/lib/python3.11/site-packages/flashinfer/comm/fd_exchange.py", line 55, in '
    "<module>\n"
    "    def _fd_ancillary(fd: int) -> tuple[tuple[int, int, array.array[int]]]:\n"
    "TypeError: type 'array.array' is not subscriptable\n"
)


def test_an_error_raised_while_importing_is_not_filed_by_the_package_it_passed_through():
    rc = triage_text(IMPORT_TIME).root_cause
    assert (rc.category, rc.basis) == ("other", "none")


def test_the_same_error_raised_by_a_call_is_filed_by_its_frame():
    called = IMPORT_TIME.replace(", in <module>", ", in plan")
    rc = triage_text(called).root_cause
    assert (rc.category, rc.basis) == ("attention_backend", "frames")


def test_a_keyword_another_packages_version_does_not_take_is_an_install_mismatch():
    # SGLang's FlashInfer backend calling an older FlashInfer (corpus/full-logs jethac sglang)
    text = (
        "Traceback (most recent call last):\n"
        '  File "/sglang/srt/layers/attention/flashinfer_backend.py", line 3255, in '
        "call_begin_forward\n"
        "    wrapper.begin_forward(\n"
        "TypeError: BatchDecodeWithPagedKVCacheWrapper.plan() got an unexpected keyword argument "
        "'k_data_type'\n"
    )
    assert triage_text(text).root_cause.category == "other"
    assert triage_text(
        text.replace("got an unexpected keyword argument", "refuses")
    ).root_cause.category == ("attention_backend")


def test_a_cpp_check_is_filed_by_the_source_file_it_names():
    # vLLM's CUDACHECK: printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, ...)
    # (csrc/custom_all_reduce.cuh@v0.6.6): the custom all-reduce is TP communication
    line = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:336 'invalid argument'\n"
    rc = triage_text(line).root_cause
    assert (rc.category, rc.basis) == ("nccl_distributed", "frames")
    other_file = triage_text(line.replace("custom_all_reduce.cuh", "cache_kernels.cu")).root_cause
    assert other_file.category == "other"


# vLLM's CUDACHECK line (csrc/custom_all_reduce.cuh@v0.6.6) and the engine core's report of the
# worker's death (vllm/v1/executor/multiproc_executor.py@v0.10.0, "Worker proc %s died
# unexpectedly", wrapped by core.py's "EngineCore failed to start").
CUDACHECK = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'invalid argument'\n"
WORKER_DIED = "EngineCore failed to start: Worker proc VllmWorker-0 died unexpectedly\n"


def test_a_reported_death_yields_to_the_error_printed_before_it():
    rc = triage_text(CUDACHECK + WORKER_DIED).root_cause
    assert (rc.line, rc.category) == (1, "nccl_distributed")


def test_an_error_printed_after_the_death_does_not_explain_it():
    rc = triage_text(WORKER_DIED + CUDACHECK).root_cause
    assert (rc.line, rc.signature) == (1, "worker-died-by-signal")


def test_a_kernel_fault_reported_at_the_next_sync_yields_to_the_runtimes_own_report():
    # ROCm's runtime reports the hardware exception (rocclr rocdevice.cpp), then ggml's CUDA
    # check reports "unspecified launch failure" (ggml/src/ggml-cuda/ggml-cuda.cu CUDA_CHECK)
    text = (
        ":0:rocdevice.cpp            :3587: 1012355198 us:  Callback: Queue 0x7cb113a00000 "
        "aborting with error : "
        "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: "
        "0x1016\n"
        "Kernel Name: __amd_rocclr_copyBuffer\n"
        " ROCm error: unspecified launch failure\n"
        "/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:97: ROCm error\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.line, rc.category) == (1, "cuda_driver_arch")
    # without the runtime's report the vague fault is all there is
    assert (
        triage_text("\n".join(text.splitlines()[2:]) + "\n").root_cause.signature
        == "cuda-illegal-memory-access"
    )


def test_a_cut_tracebacks_code_line_logged_at_error_level_is_a_frame_not_the_error():
    # vLLM's multiproc executor logs each traceback line at ERROR level (multiproc_executor.py
    # worker_main@v0.10.2); an excerpt that starts below the header opens with a code line
    prefix = "(VllmWorker rank=1 pid=7226) ERROR 09-03 03:02:37 [multiproc_executor.py:522] "
    text = (
        f"{prefix}    pg.recv([tensor], group_src_rank, tag).wait()\n"
        f"{prefix}RuntimeError: create_config:torch_npu HCCL function error: "
        f"hcclCommInitRootInfoConfig(numRanks, "
        "&rootInfo, rank, config, &(comm->hcclComm_)), error code is 1\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.line, rc.exception, rc.category) == (2, "RuntimeError", "nccl_distributed")
    # the same line not indented is a message of its own, and the first error
    assert triage_text(text.replace("]     pg.recv", "] pg.recv failed")).root_cause.line == 1


def test_a_workers_method_wrapper_points_at_the_error_it_wraps():
    # vllm/worker/worker_base.py@v0.5.5 execute_method: logger.exception("Error executing method
    # ...") then raise; oneCCL's own report (|CCL_ERROR|) came first
    text = (
        "(WrapperWithLoadBit pid=35347) 2024:09:13-11:21:50:(35347) |CCL_ERROR| "
        "exchange_utils.cpp:202 sendmsg_fd: "
        'condition !check_msg_retval("sendmsg", send_bytes, iov, msg, sizeof(u.cntr_buf), sock, '
        "fd) failed\n"
        "(WrapperWithLoadBit pid=35347) ERROR 09-13 11:21:50 worker_base.py:386] Error executing "
        "method init_device. "
        "This might cause deadlock in distributed execution.\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.line, rc.category) == (1, "nccl_distributed")
    alone = triage_text(text.splitlines()[1] + "\n").root_cause
    assert alone.basis == "echo"


def test_a_cuda_stream_capture_error_is_a_graph_failure_whichever_layer_reports_it():
    # NCCL's WARN names the CUDA call's error as cudaGetErrorString words it (code 905,
    # cudaErrorStreamCaptureIsolation); another CUDA error in the same line stays NCCL's
    line = "worker-6:56890:56890 [0] enqueue.cc:267 NCCL WARN Cuda failure '{}'\n"
    capture = triage_text(
        line.format("dependency created on uncaptured work in another stream")
    ).root_cause
    assert capture.category == "cuda_graph"
    assert (
        triage_text(line.format("invalid resource handle")).root_cause.category
        == "nccl_distributed"
    )


def test_the_dynamic_loaders_refusal_is_an_error_with_or_without_pythons_exception_name():
    # glibc's loader wording (elf/dl-lookup.c "undefined symbol: %s"); vLLM 0.2's compiled ops
    # built for torch 2.1 loaded under torch 2.0 (a paste of the import and the loader line)
    loader = (
        "/usr/lib/python3.9/site-packages/vllm/quantization_ops.cpython-39-x86_64-linux-gnu.so"
        ": undefined symbol: _ZN3c104cuda9SetDeviceEi"
    )
    for text in (f"from vllm import quantization_ops\n{loader}\n", f"ImportError: {loader}\n"):
        rc = triage_text(text).root_cause
        assert (rc.category, rc.signature) == ("cuda_driver_arch", "kernel-library-import-error")
    # a truncated driver library inside vLLM's warning (vllm/_custom_ops.py@v0.9.2)
    warning = (
        "WARNING 07-08 06:56:10 [_custom_ops.py:21] Failed to import from vllm._C with "
        "ImportError('/usr/lib/x86_64-linux-gnu/libcuda.so.1: file too short')\n"
    )
    assert triage_text(warning).root_cause.category == "cuda_driver_arch"


@pytest.mark.parametrize(
    "line",
    [
        # torch built for ROCm says HIP where a CUDA build says CUDA (hipified c10 message)
        "RuntimeError: No HIP GPUs are available",
        # torch inductor's Triton check names the GPU generation as "CUDA capability"
        "RuntimeError: Found Tesla P40 which is too old to be supported by the triton GPU "
        "compiler, which is "
        "used as the backend. Triton only supports devices of CUDA Capability >= 7.0, but your "
        "device is of "
        "CUDA capability 6.1",
        # vLLM found no accelerator and fell back (vllm/platforms/__init__.py@v0.6.6)
        "AttributeError: 'UnspecifiedPlatform' object has no attribute 'device_name'",
        # Ascend CANN has no kernel binary of the op for this SoC
        "RuntimeError: call aclnnMoeGatingTopKSoftmax failed, detail:EZ1001: Get regInfo failed, "
        "The "
        "binary_info_config.json of socVersion [ascend310p] does not support opType "
        "[MoeGatingTopKSoftmax].",
    ],
)
def test_the_same_gpu_generation_fact_in_each_vendors_words(line):
    rc = triage_text(line + "\n").root_cause
    assert (rc.category, rc.basis) == ("cuda_driver_arch", "words")
    assert rc.signature is None and rc.exception is not None  # the error itself, verbatim


def test_a_pasted_sentence_among_status_lines_is_the_error_handed_over():
    # SGLang's platform notice (INFO) above its refusal of --enable-memory-saver
    # (sglang/srt/torch_memory_saver_adapter.py@v0.4.10.post2 TorchMemorySaverAdapter.create)
    text = (
        "INFO 04-02 13:31:02 __init__.py:190] Automatically detected platform cuda.\n"
        "enable_memory_saver is enabled, but torch-memory-saver is not installed. Please install "
        "it via "
        "`pip3 uninstall torch-memory-saver`.\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.line, rc.basis, rc.category) == (2, "sole-line", "other")
    # two such sentences: which one is the error is not said, so no guess
    assert triage_text(text + "Something else happened here.\n").root_cause is None
    # status lines alone are no failure
    assert triage_text(text.splitlines()[0] + "\n").root_cause is None


# llama.cpp's fit step (common/fit.cpp, vendored in llama-cpp-python 0.3.36) warns and loading
# goes on; the tensors' upload then loses the Vulkan device (llama-model.cpp load_tensors,
# ggml-vulkan's vk::Queue::submit) and the loader's wrappers report it (llama.cpp tools/server).
FIT_WARNING = (
    "llama_params_fit_impl: projected to use 76386 MiB of device memory vs. 68311 MiB of free "
    "device memory\n"
    "llama_params_fit: failed to fit params to free device memory: n_gpu_layers already set by "
    "user to 999, abort\n"
)
LOAD_DIES = (
    "load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
    "load_tensors:      Vulkan0 model buffer size = 72207.88 MiB\n"
    "llama_model_load: error loading model: vk::Queue::submit: ErrorDeviceLost\n"
    "llama_model_load_from_file_impl: failed to load model\n"
    "main: exiting due to model loading error\n"
)


def test_a_cause_the_launch_warned_of_and_went_on_from_explains_the_fatal_error_after_it():
    rc = triage_text(FIT_WARNING + LOAD_DIES).root_cause
    assert "ErrorDeviceLost" in rc.message  # the line that stopped the launch
    assert (rc.category, rc.basis) == ("oom_weights", "warning-explains")
    assert "line 2" in rc.explanation


def test_without_the_warning_the_fatal_error_is_placed_by_the_runtime_status_it_carries():
    # nothing earlier says why the device was lost: Vulkan's own status (VK_ERROR_DEVICE_LOST,
    # runtime_errors.yaml) is all there is, a device the driver stack lost, and a guess
    rc = triage_text(LOAD_DIES).root_cause
    assert "ErrorDeviceLost" in rc.message
    assert (rc.category, rc.basis) == ("cuda_driver_arch", "runtime-status")
    assert "VK_ERROR_DEVICE_LOST" in rc.explanation


def test_a_phase_line_that_reports_a_failure_is_no_sign_the_process_went_on():
    # llama.cpp's context creation (src/llama-context.cpp graph_reserve, llama_init_from_model)
    text = (
        "graph_reserve: failed to allocate compute buffers\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate compute pp "
        "buffers\n"
        "main: exiting due to model loading error\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.line, rc.category) == (1, "oom_kv_cache")


def test_progress_stamped_before_the_error_is_no_sign_it_was_survived():
    # the phase line reached the file after the error but was logged before it (vLLM's
    # processes flush their lines out of order): the error was not survived
    text = (
        "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:09 [core.py:1] ERROR something broke in the "
        "engine core\n"
        "(EngineCore_DP0 pid=5) INFO 01-01 00:00:01 [default_loader.py:1] Loading weights took 3.1 "
        "seconds\n"
        "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:10 [core.py:1] ValueError: what came next\n"
    )
    assert triage_text(text).root_cause.line == 1
    later = text.replace("INFO 01-01 00:00:01", "INFO 01-01 00:00:09")
    assert triage_text(later).root_cause.line == 3
    # an unstamped progress bar cannot be placed in time against a stamped error
    bar = (
        "(EngineCore_DP0 pid=5) Loading safetensors checkpoint shards:  50% Completed | 5/10 "
        "[00:05<00:05]\n"
    )
    lines = text.splitlines(keepends=True)
    assert triage_text(lines[0] + bar + lines[2]).root_cause.line == 1


def test_one_error_of_eight_workers_is_survived_only_if_all_went_on():
    oom = (
        "(Worker_TP{0} pid=10{0}) ERROR 01-01 00:00:05 [x.py:1] RuntimeError: the frobnicator "
        "exploded\n"
    )
    loading = (
        "(Worker_TP{0} pid=10{0}) INFO 01-01 00:00:06 [default_loader.py:1] Loading weights took "
        "3.1 seconds\n"
    )
    echo = "(EngineCore_DP0 pid=5) ERROR 01-01 00:00:07 [core.py:1] EngineCore failed to start.\n"
    one_went_on = oom.format(0) + oom.format(1) + loading.format(0) + echo
    assert triage_text(one_went_on).root_cause.exception == "RuntimeError"
    both_went_on = one_went_on.replace(echo, loading.format(1) + echo)
    assert triage_text(both_went_on).root_cause.basis == "echo"


def test_a_log_quoted_in_markdown_keeps_its_prefixes_and_its_exception():
    # an issue excerpt pasted as a markdown quote, with a CI runner's ISO stamp and SGLang's own
    # (sglang/srt/managers/scheduler.py@v0.5.9 logs "Received sigquit from a child process")
    text = (
        '> [2025-11-06T02:10:00.702Z]   File "/sglang/srt/models/deepseek_vl2.py", line 252, in '
        "load_weights\n"
        ">\n"
        "> [2025-11-06T02:10:00.702Z] KeyError: 'lm_head.weight'\n"
        ">\n"
        "> [2025-11-06T02:10:00.703Z] [2025-11-06 02:10:00] Received sigquit from a child process. "
        "It usually "
        "means the child failed.\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.line, rc.exception) == (3, "KeyError")


def test_a_wrapper_quoting_an_error_no_signature_knows_is_that_errors_report():
    # the engine core quotes its worker's exception (vllm/v1/executor/multiproc_executor.py@v0.10.2
    # "Worker failed with error '{result}', please check the stack trace above ..."), then the
    # executor reports another worker's death: the quoted error came first and is the cause
    text = (
        "(EngineCore_DP1 pid=370878) ERROR 09-19 02:53:52 [core.py:718] RuntimeError: Worker "
        "failed with error "
        "'kv_cache must be a tuple', please check the stack trace above for the root cause\n"
        "(EngineCore_DP0 pid=370613) ERROR 09-19 02:54:06 [multiproc_executor.py:149] Worker proc "
        "VllmWorker-2 "
        "died unexpectedly, shutting down executor.\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.line, rc.signature) == (1, "vllm-worker-failed-wrapper")
    # a wrapper that quotes nothing stays an echo behind the death report
    bare = text.replace(
        "'kv_cache must be a tuple', please check the stack trace above for the root cause", ""
    )
    assert triage_text(bare).root_cause.signature == "worker-died-by-signal"


def test_the_projector_loaders_quoted_exception_is_the_error_and_names_its_category():
    # llama.cpp tools/mtmd/clip.cpp clip_init: "%s: failed to load model '%s': %s", then the
    # mtmd and server wrappers (llama-cpp-python vendor@v0.3.36)
    text = (
        "clip_init: failed to load model 'model.mmproj': load_hparams: unknown projector type: "
        "gemma4uv\n"
        "\n"
        "mtmd_init_from_file: error: Failed to load CLIP model from model.mmproj\n"
        "srv    load_model: failed to load multimodal model, 'model.mmproj'\n"
        "main: exiting due to model loading error\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.line, rc.category) == (1, "unsupported_arch")


# A vLLM server that became ready (uvicorn's "Application startup complete."), then a worker's
# error while serving (a FlashInfer kernel check, corpus/full-logs trietnguyeminh), then the
# API server's report that the engine core is dead (vllm/v1/engine/async_llm.py@v0.10.2
# output_handler logs "AsyncLLM output_handler failed." over the EngineDeadError).
READY = "(APIServer pid=1) INFO:     Application startup complete.\n"
SERVING_ERROR = (
    "(Worker_TP0 pid=300) ERROR 06-13 20:09:13 [multiproc_executor.py:962] RuntimeError: Check "
    "failed: "
    "(status == cudaSuccess) is false: BatchPrefillWithPagedKVCache failed with error invalid "
    "argument\n"
)
ENGINE_DEAD = (
    "(APIServer pid=1) ERROR 06-13 20:09:14 [async_llm.py:704] AsyncLLM output_handler failed.\n"
    "(APIServer pid=1) ERROR 06-13 20:09:14 [async_llm.py:704] "
    "vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
)


def test_an_error_while_serving_that_the_engine_died_of_is_the_root_cause():
    rc = triage_text(READY + SERVING_ERROR + ENGINE_DEAD).root_cause
    assert (rc.line, rc.exception) == (2, "RuntimeError")


def test_an_error_while_serving_that_the_engine_survived_is_not_blamed():
    d = triage_text(READY + SERVING_ERROR)
    assert d.healthy and d.root_cause is None


def test_a_death_with_nothing_before_it_is_reported_as_the_death():
    rc = triage_text(READY + ENGINE_DEAD).root_cause
    assert rc.signature == "vllm-engine-dead" and rc.line == 3


def test_a_kill_after_an_exception_is_the_exceptions_consequence_but_a_pointer_explains_nothing():
    # SGLang's warmup failure logs the exception and kills its own process tree
    # (sglang/srt/entrypoints/http_server.py@v0.4.3 _wait_and_warmup); the shell says "Killed"
    warmup = (
        "[2024-12-13 01:47:34] Initialization failed. warmup error: Traceback (most recent call "
        "last):\n"
        '  File "/sglang/python/sglang/srt/server.py", line 621, in _wait_and_warmup\n'
        '    assert res.status_code == 200, f"{res=}, {res.text=}"\n'
        "AssertionError: res=<Response [502]>, res.text=''\n"
        "Killed\n"
    )
    assert triage_text(warmup).root_cause.exception == "AssertionError"
    # vLLM's executor only points at the worker's traceback (CRITICAL, "See stack trace above"),
    # and the worker was killed before printing one: the kill is all there is
    pointer = (
        "CRITICAL 05-07 19:18:17 [core_client.py:359] Got fatal signal from worker processes, "
        "shutting down. "
        "See stack trace above for root cause issue.\n"
        "Killed\n"
    )
    assert triage_text(pointer).root_cause.signature == "process-killed-oom"


def test_names_quoted_by_a_version_mismatch_lend_no_category_but_a_missing_package_does():
    # CPython's wording (Python/ceval.c import_from): an installed flashinfer of another version
    mismatch = (
        "ImportError: cannot import name 'top_k_top_p_sampling_from_probs' from "
        "'flashinfer.sampling'\n"
    )
    assert triage_text(mismatch).root_cause.category == "other"
    # a package that is not installed at all: which one says which part cannot run
    missing = "ModuleNotFoundError: No module named 'vllm.vllm_flash_attn.layers'\n"
    assert triage_text(missing).root_cause.category == "attention_backend"


def test_an_older_servers_shutdown_into_a_reused_log_is_not_a_new_launch():
    # vLLM's memory-profiling guard (signature vllm-memory-profiling-error) in this run; an
    # older API server under another pid writes uvicorn's shutdown line
    # (uvicorn/lifespan/on.py@0.30.6)
    run = (
        "(APIServer pid=414156) INFO 01-12 01:42:14 [api_server.py:1351] vLLM API server version "
        "0.13.0\n"
        "(EngineCore_DP0 pid=414253) ERROR 01-12 01:42:51 [core.py:866] AssertionError: Error in "
        "memory "
        "profiling. Initial free memory 62.7452392578125 GiB, current free memory "
        "63.12884521484375 GiB.\n"
    )
    d = triage_text(run + "(APIServer pid=413441) INFO:     Application shutdown complete.\n")
    assert (d.launches, d.stale, d.root_cause.line) == (1, False, 2)
    # the same pid change with a line of a running server is a new launch
    relaunch = triage_text(
        run + "(APIServer pid=413441) INFO 01-12 01:43:00 [api_server.py:1] args: {}\n"
    )
    assert relaunch.launches == 2 and relaunch.stale


# vLLM on ROCm warns when its compiled ops cannot be imported and goes on
# (vllm/platforms/rocm.py@v0.19.0 logs "Failed to import from vllm._C with %r"); an offline
# run's progress bars follow, unstamped (tqdm).
ROCM_IMPORT_WARNING = (
    "WARNING 08-17 17:26:49 [rocm.py:43] Failed to import from vllm._C with "
    "ModuleNotFoundError(\"No module named 'vllm._C'\")\n"
    "WARNING 08-17 17:26:49 [rocm.py:49] Failed to import from vllm._rocm_C with "
    "ModuleNotFoundError(\"No module named 'vllm._rocm_C'\")\n"
)
SHARDS_DONE = "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:02<00:00,  2.24s/it]\n"


def test_a_warning_its_process_went_on_from_is_no_failure():
    assert triage_text(ROCM_IMPORT_WARNING + SHARDS_DONE).root_cause is None
    # the same warning where the log stops is still what it shows: nothing followed it
    alone = triage_text("INFO 08-17 17:26:48 [x.py:1] Starting\n" + ROCM_IMPORT_WARNING).root_cause
    assert alone is not None and alone.line == 2  # the first of the two


def test_a_warning_does_not_hide_an_error_after_the_phase_it_went_on_to():
    oom = (
        "ERROR 08-17 17:27:01 [core.py:700] torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 2.00 GiB. GPU 0 has a total capacity of 11.98 GiB of which 1.02 GiB is free.\n"
    )
    cause = triage_text(ROCM_IMPORT_WARNING + SHARDS_DONE + oom).root_cause
    assert cause is not None and cause.line == 4


# SGLang's capture progress (sglang/srt/model_executor/cuda_graph_runner.py@v0.5.5.post3
# tqdm "Capturing batches (bs=... avail_mem=...)"), cut at different points.
CAPTURE = "Capturing batches (bs={bs} avail_mem=14.64 GB): {pct}%|{bar}| {n}/4 [00:01<00:00]\n"


def test_a_log_ending_after_capture_reached_its_end_is_no_capture_hang():
    done = SHARDS_DONE + CAPTURE.format(bs=1, pct=100, bar="##########", n=4)
    assert triage_text(done).root_cause is None
    midway = SHARDS_DONE + CAPTURE.format(bs=4, pct=50, bar="#####     ", n=2)
    cause = triage_text(midway).root_cause
    assert cause is not None and cause.category == "cuda_graph"
