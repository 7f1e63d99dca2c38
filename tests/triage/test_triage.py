"""triage_text / triage_file: the root-cause rule, dedupe, chains, stale logs, damage."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servepilot.errors import BadInput
from servepilot.triage import api as triage_api
from servepilot.triage import triage_file, triage_text

BANNER = "(APIServer pid=100) INFO 12-29 15:00:00 [api_server.py:1885] vLLM API server version 0.16.0\n"
ENGINE = (
    "(EngineCore_DP0 pid={pid}) INFO 12-29 15:00:05 [core.py:93] Initializing a V1 LLM engine (v0.16.0) with config: "
    "model='m'\n"
)
SELECTOR = (
    "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576, "
    "dtype=torch.bfloat16, kv_cache_dtype=fp8_e4m3, block_size=None, use_mla=True, has_sink=False, "
    "use_sparse=False). Reasons: {FLASH_ATTN_MLA: [kv_cache_dtype not supported, compute capability not supported], "
    "FLASHMLA: [compute capability not supported], FLASHINFER_MLA: [compute capability not supported], "
    "TRITON_MLA: [kv_cache_dtype not supported], FLASHMLA_SPARSE: [non-sparse not supported, compute capability not "
    "supported]}."
)


def worker_traceback_lines(rank: int, last: str, ts: str = "12-29 15:21:11") -> list[str]:
    prefix = f"(Worker_TP{rank} pid={2000 + rank}) ERROR {ts} [multiproc_executor.py:751] "
    frames = [
        "Traceback (most recent call last):",
        '  File "/venv/vllm/v1/executor/multiproc_executor.py", line 722, in worker_main',
        "    worker = WorkerProc(*args, **kwargs)",
        '  File "/venv/vllm/v1/attention/selector.py", line 98, in _cached_get_attn_backend',
        "    raise ValueError(",
        last,
    ]
    return [prefix + f for f in frames]


def interleaved_failure(ranks: int = 8, last: str = SELECTOR) -> str:
    per_rank = [worker_traceback_lines(r, last) for r in range(ranks)]
    lines = [per_rank[r][i] for i in range(len(per_rank[0])) for r in range(ranks)]
    lines += [
        "(EngineCore_DP0 pid=1500) ERROR 12-29 15:21:12 [core.py:708] EngineCore failed to start.",
        "(EngineCore_DP0 pid=1500) ERROR 12-29 15:21:12 [core.py:708] RuntimeError: Worker failed with error "
        "'No valid attention backend found for cuda', please check the stack trace above for the root cause",
        "(APIServer pid=100) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}",
    ]
    return "\n".join(lines) + "\n"


def test_eight_interleaved_worker_tracebacks_are_one_error_x8_before_the_engine_echo():
    d = triage_text(BANNER + ENGINE.format(pid=1500) + interleaved_failure())
    rc = d.root_cause
    assert rc is not None
    assert rc.signature == "vllm-attn-no-valid-backend"
    assert rc.count == 8
    assert rc.processes == tuple(sorted(f"Worker_TP{r}" for r in range(8)))
    assert rc.process == "Worker_TP0"
    # the excerpt carries the worker's own frames, not another worker's
    assert "selector.py" in rc.excerpt and rc.excerpt.splitlines()[-1].endswith(SELECTOR)
    assert rc.line == 3 + 5 * 8  # banner, engine banner, then 5 interleaved rows of 8 before the exception row
    # the echoes are reported as other errors, not as the cause
    assert {e.signature for e in d.other_errors} >= {"vllm-engine-core-init-failed"}
    assert d.stale is False


def test_attention_selector_blocked_only_by_kv_dtype_is_a_kv_cache_dtype_failure():
    # TRITON_MLA is the one backend this GPU supports and it rejects only the KV dtype.
    d = triage_text(interleaved_failure(ranks=2))
    assert d.root_cause.category == "kv_cache_dtype"
    assert "TRITON_MLA" in d.root_cause.explanation
    assert d.remedies[0].check == "SP-KV-001"


def test_attention_selector_with_other_obstacles_stays_attention_backend():
    sparse = SELECTOR.replace("TRITON_MLA: [kv_cache_dtype not supported]", "TRITON_MLA: [sparse not supported]")
    d = triage_text(interleaved_failure(ranks=2, last=sparse))
    assert d.root_cause.category == "attention_backend"
    assert any(r.check == "SP-ATTN-001" for r in d.remedies)


def test_worker_exception_explains_the_engine_echo_even_when_the_echo_is_printed_first():
    text = (
        "(APIServer pid=100) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}\n"
        "(Worker_TP0 pid=7) ERROR 12-29 15:21:11 [multiproc_executor.py:751] "
        "ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8).\n"
    )
    rc = triage_text(text).root_cause
    assert rc.category == "tp_divisibility"
    assert rc.process == "Worker_TP0"
    assert "28" in rc.explanation and "8" in rc.explanation


def test_wrapped_worker_message_is_unwrapped_when_the_worker_traceback_is_missing():
    text = (
        "(EngineCore pid=1122) ERROR 09-19 19:20:03 [core.py:1378] RuntimeError: Worker failed with error "
        "'MLA kv_data_type torch.uint8 is not supported. Supported dtypes: [torch.bfloat16].', please check "
        "the stack trace above for the root cause\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.category, rc.signature) == ("kv_cache_dtype", "mla-kv-dtype-unsupported")


def test_earlier_kernel_import_error_explains_a_later_architecture_not_supported():
    text = (
        "ImportError: /venv/vllm/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi\n"
        "INFO 01-01 00:00:01 [registry.py:1] something else\n"
        "ValueError: Model architectures ['Qwen3ForCausalLM'] failed to be inspected. Please check the logs for more "
        "details.\n"
    )
    rc = triage_text(text).root_cause
    assert rc.signature == "kernel-library-import-error"
    assert rc.line == 1
    alone = triage_text(text.splitlines(keepends=True)[2]).root_cause
    assert alone.category == "unsupported_arch"


def test_chained_exceptions_blame_the_first_exception_of_the_chain():
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/venv/vllm/model_executor/model_loader/loader.py", line 10, in load_model',
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
            "23.6 GiB",
            "",
            "The above exception was the direct cause of the following exception:",
            "",
            "Traceback (most recent call last):",
            '  File "/venv/vllm/engine.py", line 5, in start',
            "RuntimeError: Engine process failed to start. See stack trace for the root cause.",
        ]
    )
    d = triage_text(text)
    assert d.root_cause.line == 3
    assert d.root_cause.exception == "torch.OutOfMemoryError"
    assert d.root_cause.category == "oom_weights"  # load_model frame, no KV or graph context
    assert [e.exception for e in d.other_errors] == ["RuntimeError"]


def test_during_handling_chain_is_tracked_per_process():
    text = "\n".join(
        [
            "(Worker_TP1 pid=2) ERROR 01-01 00:00:00 [x.py:1] Traceback (most recent call last):",
            "(Worker_TP0 pid=1) ERROR 01-01 00:00:00 [x.py:1] Traceback (most recent call last):",
            '(Worker_TP1 pid=2) ERROR 01-01 00:00:00 [x.py:1]   File "/a.py", line 1, in f',
            "(Worker_TP0 pid=1) ERROR 01-01 00:00:00 [x.py:1] KeyError: 'qwen3'",
            "(Worker_TP1 pid=2) ERROR 01-01 00:00:00 [x.py:1] KeyError: 'qwen3'",
            "(Worker_TP0 pid=1) ERROR 01-01 00:00:00 [x.py:1] During handling of the above exception, another "
            "exception occurred:",
            "(Worker_TP0 pid=1) ERROR 01-01 00:00:00 [x.py:1] Traceback (most recent call last):",
            "(Worker_TP0 pid=1) ERROR 01-01 00:00:00 [x.py:1] ValueError: The checkpoint you are trying to load has "
            "model type `qwen3` but Transformers does not recognize this architecture.",
        ]
    )
    d = triage_text(text)
    # the unknown KeyError is earlier, but a known cause outranks an unknown exception
    assert d.root_cause.category == "unsupported_arch"
    keyerror = next(e for e in d.other_errors if e.exception == "KeyError")
    assert keyerror.count == 2 and keyerror.processes == ("Worker_TP0", "Worker_TP1")


def test_unmatched_exception_is_reported_with_type_message_and_process():
    text = "(Worker_TP2 pid=9) ERROR 01-01 00:00:00 [x.py:1] FrobnicationError: the flux capacitor is unaligned\n"
    rc = triage_text(text).root_cause
    assert rc.category == "other" and rc.signature is None
    assert rc.exception == "FrobnicationError"
    assert rc.message == "FrobnicationError: the flux capacitor is unaligned"
    assert rc.process == "Worker_TP2"
    assert "FrobnicationError" in rc.explanation


def test_specific_nccl_warning_beats_the_generic_nccl_error_printed_before_it():
    text = (
        "(VllmWorkerProcess pid=221) ERROR 04-06 20:46:48 [multiproc_worker_utils.py:238] "
        "torch.distributed.DistBackendError: "
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled system error\n"
        "host:1:1 [0] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-abc (size 7340384)\n"
    )
    d = triage_text(text)
    assert d.root_cause.category == "shm"
    assert any(e.category == "nccl_distributed" for e in d.other_errors)


def test_cuda_oom_during_graph_capture_is_a_cuda_graph_failure():
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/venv/vllm/v1/worker/gpu_model_runner.py", line 2400, in capture_model',
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of "
            "44.53 GiB",
        ]
    )
    assert triage_text(text).root_cause.category == "cuda_graph"


def test_benign_fallback_notice_is_a_note_not_a_cause():
    d = triage_text(
        "INFO 01-01 00:00:00 [selector.py:1] Cannot use FlashAttention-2 backend for head size 72.\n"
        "(APIServer pid=1) INFO 01-01 00:00:09 [launcher.py:1] Application startup complete.\n"
    )
    assert d.root_cause is None
    assert d.healthy is True
    assert [n.signature for n in d.notes] == ["vllm-attn-fa2-head-size-fallback"]


def test_request_errors_after_a_healthy_start_are_not_blamed_unless_known():
    text = (
        BANNER
        + "(APIServer pid=100) INFO 12-29 15:05:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
        + "(APIServer pid=100) ERROR 12-29 15:06:00 [serving.py:1] SomeClientError: bad request body\n"
    )
    d = triage_text(text)
    assert d.healthy and d.root_cause is None
    assert [e.exception for e in d.other_errors] == ["SomeClientError"]
    known = (
        text
        + "(APIServer pid=100) ERROR 12-29 15:07:00 [serving.py:1] ValueError: As of transformers v4.44, default chat "
          "template is no longer allowed, so you must provide a chat template if the tokenizer does not define one.\n"
    )
    assert triage_text(known).root_cause.category == "tokenizer_template"


def test_second_banner_marks_the_log_stale_and_the_last_launch_is_diagnosed():
    first = BANNER + ENGINE.format(pid=1500) + interleaved_failure(ranks=2)
    second = (
        BANNER
        + ENGINE.format(pid=1600)
        + "(Worker_TP0 pid=3000) ERROR 12-29 15:40:00 [multiproc_executor.py:751] ValueError: No available memory for "
          "the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\n"
    )
    d = triage_text(first + second)
    assert d.stale is True and d.launches == 2
    assert "second start-up banner" in d.stale_reason
    assert d.root_cause.category == "oom_kv_cache"
    assert d.root_cause.launch == 1
    assert any(e.launch == 0 and e.category == "kv_cache_dtype" for e in d.other_errors)


def test_new_pid_for_a_rank_named_process_is_a_new_launch_even_without_banners():
    text = (
        "(Worker_TP0 pid=10) ERROR 01-01 00:00:00 [x.py:1] ValueError: Total number of attention heads (28) must be "
        "divisible by tensor parallel size (8).\n"
        "(Worker_TP0 pid=99) INFO 01-01 00:10:00 [x.py:1] Starting to load model\n"
        "(Worker_TP0 pid=99) ERROR 01-01 00:10:05 [x.py:1] RuntimeError: Bus error (core dumped)\n"
    )
    d = triage_text(text)
    assert d.stale and "new pid" in d.stale_reason
    assert d.root_cause.category == "shm"


def test_shared_worker_names_with_many_pids_are_one_launch():
    text = "".join(
        f"(VllmWorkerProcess pid={p}) ERROR 04-06 20:46:48 [w.py:1] RuntimeError: NCCL error: unhandled cuda error\n"
        for p in (11, 12, 13)
    )
    d = triage_text(text)
    assert d.stale is False
    assert d.root_cause.count == 3


def test_lines_older_than_since_are_ignored_and_flagged(tmp_path):
    log = tmp_path / "old.log"
    log.write_text(
        "(Worker_TP0 pid=1) ERROR 12-29 09:00:00 [x.py:1] ValueError: Total number of attention heads (28) must be "
        "divisible by tensor parallel size (8).\n"
        "(Worker_TP0 pid=1) ERROR 12-29 11:00:00 [x.py:1] ValueError: No available memory for the cache blocks.\n"
    )
    d = triage_file(log, since=datetime(2026, 12, 29, 10, 0, 0))
    assert d.stale and "older than the run's start" in d.stale_reason
    assert d.root_cause.category == "oom_kv_cache"
    fresh = triage_file(log)
    assert fresh.root_cause.category == "tp_divisibility" and not fresh.stale


def test_log_that_stops_in_nccl_bootstrap_is_a_suspected_hang():
    text = (
        "omega:53277:53277 [0] NCCL INFO cudaDriverVersion 12060\n"
        "NCCL version 2.20.5+cuda12.4\n"
        "omega:53278:53278 [1] NCCL INFO Bootstrap : Using wlp38s0:192.168.1.19<0>\n"
    )
    d = triage_text(text)
    assert d.root_cause.category == "nccl_distributed"
    assert d.root_cause.line == 3
    assert any("NCCL_P2P_DISABLE" in r.change for r in d.remedies)


def test_binary_garbage_does_not_crash_and_the_error_is_still_found(tmp_path):
    log = tmp_path / "garbage.log"
    noise = bytes(range(256)) * 50 + b"\xff\xfe\x00\x00" * 1000
    data = (
        noise
        + b"\n"
        + noise
        + b"\nRuntimeError: CUDA error: no kernel image is available for execution on the device\n"
        + b"\xc3\x28\xa0\xa1" * 10
    )
    log.write_bytes(data)
    d = triage_file(log)
    assert d.root_cause.category == "cuda_driver_arch"
    assert d.root_cause.line == data.count(b"\n")  # the error is the last complete line
    assert d.lines_read == data.count(b"\n") + 1  # plus the unterminated garbage line


def test_big_file_through_the_prefilter_agrees_with_the_dense_parse(tmp_path, monkeypatch):
    filler = "".join(
        f'(APIServer pid=100) INFO 12-29 15:00:{i % 60:02d} [loggers.py:1] 10.0.0.1 - "POST /v1/completions HTTP/1.1" '
        f'200 OK\n'
        for i in range(3000)
    )
    bar = "".join(f"\rLoading safetensors checkpoint shards: {p}% Completed" for p in range(0, 101, 20)) + "\n"
    text = BANNER + ENGINE.format(pid=1500) + filler + bar + interleaved_failure() + filler
    log = tmp_path / "big.log"
    log.write_text(text)
    dense = triage_file(log)
    monkeypatch.setattr(triage_api, "DENSE_FILE_BYTES", 1)  # force the needle prefilter
    import servepilot.triage.scan as scan

    monkeypatch.setattr(scan, "DENSE_TAIL", 100)  # and keep the tail out of the way
    monkeypatch.setattr(scan, "CHUNK_BYTES", 4096)  # and many chunk boundaries
    sparse = triage_file(log)
    # the progress bar mid-file carries no needle, so only the dense parse knows the phase
    assert dense.root_cause.phase == "weights_loading" and sparse.root_cause.phase is None
    assert replace(sparse.root_cause, phase=None) == replace(dense.root_cause, phase=None)
    assert sparse.root_cause.count == 8
    assert sparse.lines_read == dense.lines_read == text.count("\n")


def test_unreadable_paths_are_bad_input(tmp_path):
    import os

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        triage_file(fifo)
    with pytest.raises(BadInput, match="cannot read log"):
        triage_file(tmp_path / "missing.log")
    with pytest.raises(BadInput, match="directory"):
        triage_file(tmp_path)
    with pytest.raises(BadInput, match="unknown engine"):
        triage_text("x", engine="tgi")


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=4000))
def test_any_bytes_give_a_diagnosis_never_an_exception(data):
    d = triage_text(data.decode("utf-8", errors="replace"))
    assert d.lines_read >= 0
    assert d.root_cause is None or d.root_cause.category


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([
    "Traceback (most recent call last):",
    '  File "/a.py", line 1, in f',
    "The above exception was the direct cause of the following exception:",
    "ValueError: No available memory for the cache blocks.",
    "(Worker_TP1 pid=5) ERROR 01-01 00:00:00 [x.py:1] Traceback (most recent call last):",
    "(Worker_TP1 pid=5) ERROR 01-01 00:00:00 [x.py:1] KeyError: 'x'",
    "(APIServer pid=1) INFO 01-01 00:00:00 [a.py:1] vLLM API server version 0.16.0",
    "INFO:     Application startup complete.",
    "\x1b[31mERROR\x1b[0m",
    "progress 10%\rprogress 100%",
]), max_size=40))
def test_any_mix_of_log_shapes_gives_a_consistent_diagnosis(lines):
    d = triage_text("\n".join(lines) + "\n")
    assert d.launches >= 1
    assert d.stale == (d.launches > 1)
    if d.root_cause is not None:
        assert 1 <= d.root_cause.line <= d.lines_read


SGLANG_LOG = """[2025-03-10 10:00:00] server_args=ServerArgs(model_path='/m', tp_size=2, mem_fraction_static=0.84)
[2025-03-10 10:00:30 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 715, in init_memory_pool
    raise RuntimeError(
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.

[2025-03-10 10:00:30 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 715, in init_memory_pool
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
[2025-03-10 10:00:31] Received sigquit from a child process. It usually means the child failed.
Killed
"""


def test_sglang_inline_tracebacks_belong_to_the_rank_that_opened_them():
    d = triage_text(SGLANG_LOG)
    rc = d.root_cause
    assert (rc.category, rc.line, rc.count, rc.processes) == ("oom_kv_cache", 5, 2, ("TP0", "TP1"))
    assert "init_memory_pool" in rc.excerpt
    signatures = {e.signature for e in d.other_errors}
    assert {"sglang-child-failed-echo", "process-killed-oom"} <= signatures


def test_llama_cpp_cause_comes_before_its_failed_to_load_echoes():
    text = (
        "build: 4743 (d07c6213) with cc (Ubuntu 13.2.0) 13.2.0 for x86_64-linux-gnu\n"
        "llama_model_load: error loading model: error loading model architecture: unknown model architecture: "
        "'qwen3next'\n"
        "llama_model_load_from_file_impl: failed to load model\n"
        "srv    load_model: failed to load model, '/m.gguf'\n"
        "main: exiting due to model loading error\n"
    )
    d = triage_text(text)
    assert d.engine == "llama.cpp"
    assert (d.root_cause.category, d.root_cause.line) == ("unsupported_arch", 2)
    assert "qwen3next" in d.root_cause.explanation
    assert all(e.signature == "llamacpp-load-failed-echo" for e in d.other_errors)


def test_port_taken_right_after_the_readiness_line_is_still_the_cause():
    text = (
        BANNER
        + "(APIServer pid=100) INFO 12-29 15:05:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
        + "(APIServer pid=100) ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
          "address already in use\n"
    )
    d = triage_text(text)
    assert d.root_cause.category == "port_in_use"
    assert "0.0.0.0" in d.root_cause.explanation


def test_exception_lines_pasted_with_markdown_keep_their_type():
    rc = triage_text("> **FrobnicationError: the flux capacitor is unaligned**\n").root_cause
    assert (rc.exception, rc.category) == ("FrobnicationError", "other")


def test_a_flood_of_repeated_errors_stays_bounded(monkeypatch):
    import servepilot.triage.events as events

    monkeypatch.setattr(events, "_EVENTS_KEPT", 10)
    text = "".join(
        f"(APIServer pid=1) ERROR 01-01 00:00:00 [s.py:1] BadRequestError: request {i} malformed\n" for i in range(500)
    )
    text += "(Worker_TP0 pid=2) ERROR 01-01 00:00:01 [w.py:1] ValueError: No available memory for the cache blocks.\n"
    d = triage_text(text)
    assert d.root_cause.category == "oom_kv_cache"
    assert [e.exception for e in d.other_errors] == ["BadRequestError"]


@pytest.mark.parametrize(
    ("progress", "category"),
    [
        (
            "(Worker_TP0 pid=1) INFO 04-24 08:27:56 [model_runner.py:1456] Capturing cudagraphs for decoding.",
            "cuda_graph",
        ),
        (
            "(Worker_TP0 pid=1) INFO 04-24 08:27:56 [gpu_worker.py:1] Memory profiling takes 5.10 seconds",
            "oom_kv_cache",
        ),
        ("(Worker_TP0 pid=1) Loading safetensors checkpoint shards:  50% Completed | 2/4", "oom_weights"),
    ],
)
def test_a_bare_cuda_oom_is_placed_by_the_start_up_phase_it_interrupted(progress, category):
    text = (
        progress
        + "\n(Worker_TP0 pid=1) ERROR 04-24 08:27:59 [x.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to "
          "allocate 2.00 MiB.\n"
    )
    assert triage_text(text).root_cause.category == category


def test_a_log_not_written_since_the_run_began_is_stale(tmp_path):
    import os

    log = tmp_path / "reused.log"
    log.write_text("ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8).\n")
    old = datetime(2026, 1, 1, 12, 0, 0).timestamp()
    os.utime(log, (old, old))
    d = triage_file(log, since=datetime(2026, 1, 1, 13, 0, 0))
    assert d.stale and "before the run began" in d.stale_reason
    assert d.root_cause.category == "tp_divisibility"  # still shown, but flagged
    assert not triage_file(log, since=datetime(2026, 1, 1, 11, 0, 0)).stale


def test_a_file_that_is_not_text_is_bad_input_naming_it(tmp_path):
    import random

    from servepilot.errors import BadInput

    log = tmp_path / "random.bin"
    log.write_bytes(random.Random(7).randbytes(200_000))
    with pytest.raises(BadInput) as err:
        triage_file(log)
    assert str(log) in str(err.value) and "not a text log" in str(err.value)


def test_a_text_log_with_a_garbled_stretch_is_still_triaged(tmp_path):
    import random

    log = tmp_path / "mixed.log"
    text = b"INFO 02-10 11:58:01 [api_server.py:1351] vLLM API server version 0.16.0\n" * 200
    garbled = random.Random(3).randbytes(3_000)
    log.write_bytes(text + garbled + b"\nOSError: [Errno 98] Address already in use\n")
    d = triage_file(log)
    assert d.root_cause is not None and d.root_cause.category == "port_in_use"
