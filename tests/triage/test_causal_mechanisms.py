"""Issue 13, mechanism over strings: what a process survived, where an error was raised, and
which error of several processes came first. Each log is built from lines the engines print
(the source of each is said beside it); each test shows the mechanism on a case it decides
both ways."""

from __future__ import annotations

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
    "[2026-06-10 02:25:10] Received sigquit from a child process. It usually means the child failed.\n"
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
        "(Worker_TP1 pid=9) ERROR 01-01 00:00:01 [multiproc_executor.py:1] RuntimeError: CUDA driver "
        "initialization failed, you might not have a CUDA gpu.\n"
        "(Worker_TP0 pid=8) INFO 01-01 00:00:02 [default_loader.py:1] Loading weights took 3.1 seconds\n"
        "(Worker_TP0 pid=8) ERROR 01-01 00:00:03 [x.py:1] ValueError: something later\n"
    )
    assert triage_text(text).root_cause.line == 1


# An exception raised while a module was imported (vLLM's engine core importing flashinfer on
# Python 3.11, corpus/full-logs phivan): the attention package on the import path is no
# attention failure.
IMPORT_TIME = (
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 1, in run_engine_core\n'
    "    engine_core = EngineCoreProc(*args, **kwargs)\n"
    '  File "/venv/lib/python3.11/site-packages/flashinfer/comm/__init__.py", line 4, in <module>\n'
    "    from .trtllm_ar import AllReduceFusionOp as AllReduceFusionOp\n"
    '  File "/venv/lib/python3.11/site-packages/flashinfer/comm/fd_exchange.py", line 55, in <module>\n'
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
        '  File "/sglang/srt/layers/attention/flashinfer_backend.py", line 3255, in call_begin_forward\n'
        "    wrapper.begin_forward(\n"
        "TypeError: BatchDecodeWithPagedKVCacheWrapper.plan() got an unexpected keyword argument 'k_data_type'\n"
    )
    assert triage_text(text).root_cause.category == "other"
    assert triage_text(text.replace("got an unexpected keyword argument", "refuses")).root_cause.category == (
        "attention_backend"
    )


def test_a_cpp_check_is_filed_by_the_source_file_it_names():
    # vLLM's CUDACHECK: printf("Failed: Cuda error %s:%d '%s'\n", __FILE__, __LINE__, ...)
    # (csrc/custom_all_reduce.cuh@v0.6.6): the custom all-reduce is TP communication
    line = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:336 'invalid argument'\n"
    rc = triage_text(line).root_cause
    assert (rc.category, rc.basis) == ("nccl_distributed", "frames")
    other_file = triage_text(line.replace("custom_all_reduce.cuh", "cache_kernels.cu")).root_cause
    assert other_file.category == "other"
