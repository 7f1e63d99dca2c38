"""Issue 13's mechanism: phase, warnings below fatal errors, order in time, confidence, alternatives."""

from __future__ import annotations

import pytest

from servepilot.triage import triage_text

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB."


@pytest.mark.parametrize(
    ("progress", "category"),
    [
        (
            "(Worker_TP0 pid=7) INFO 01-01 00:00:01 [default_loader.py:1] Loading safetensors checkpoint shards: 50%",
            "oom_weights",
        ),
        (
            "(Worker_TP0 pid=7) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 10.2 GiB",
            "oom_kv_cache",
        ),
        (
            "(Worker_TP0 pid=7) INFO 01-01 00:00:01 [gpu_model_runner.py:1] Capturing CUDA graphs (mixed "
            "prefill-decode)",
            "cuda_graph",
        ),
        (
            "(Worker_TP0 pid=7) INFO 01-01 00:00:01 [gpu_model_runner.py:1] Graph capturing finished in 5 secs",
            "oom_kv_cache",
        ),
        ("(APIServer pid=6) INFO 01-01 00:00:01 [launcher.py:1] Application startup complete.", "oom_kv_cache"),
    ],
)
def test_the_phase_a_process_was_in_decides_what_a_bare_oom_means(progress, category):
    d = triage_text(f"{progress}\n(Worker_TP0 pid=7) ERROR 01-01 00:00:02 [x.py:1] {OOM}\n")
    assert d.root_cause.category == category
    assert d.root_cause.basis == "signature" and d.root_cause.confidence >= 0.9


def test_a_bare_oom_without_a_phase_is_not_confident_and_names_the_other_phases():
    d = triage_text(OOM + "\n")
    rc = d.root_cause
    assert (rc.category, rc.basis) == ("oom_weights", "signature-bare")
    assert rc.confidence < 0.9
    assert {"oom_kv_cache", "cuda_graph"} <= {a.category for a in d.alternatives}
    assert all(a.confidence < rc.confidence for a in d.alternatives)


def test_an_oom_inside_nccl_during_graph_capture_is_a_cuda_graph_failure_not_a_network_one():
    text = (
        "(Worker_TP1 pid=8) INFO 01-01 00:00:01 [gpu_model_runner.py:1] Capturing CUDA graphs (decode, FULL)\n"
        "host:8:9 [1] include/alloc.h:103 NCCL WARN Cuda failure 'out of memory'\n"
        "(Worker_TP1 pid=8) ERROR 01-01 00:00:02 [x.py:1] torch.distributed.DistBackendError: NCCL error in: "
        "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled cuda error\n"
    )
    assert triage_text(text).root_cause.category == "cuda_graph"


SHM_WARNINGS = (
    "/usr/lib/python3.10/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: "
    "There appear to be 1 leaked shared_memory objects to clean up at shutdown\n"
    "2025-01-15 18:01:02,216 WARNING services.py:2022 -- WARNING: The object store is using /tmp instead of "
    "/dev/shm because /dev/shm has only 5367910400 bytes available. This will harm performance!\n"
)
NCCL_SHM = (
    "host:1:1 [0] misc/shmutils.cc:114 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-a (size "
    "9637888)\n"
)


@pytest.mark.parametrize(
    ("fatal", "category"),
    [
        (
            "ValueError: Model architectures ['Qwen2VLForConditionalGeneration'] are not supported for now.",
            "unsupported_arch",
        ),
        # an exception no signature knows still outranks a known cause printed as a warning
        ("RuntimeError: the frobnicator exploded", "other"),
    ],
)
def test_a_shared_memory_warning_never_outranks_a_fatal_error(fatal, category):
    text = (
        "[2025-01-01 10:00:00 TP0] Load weight begin.\n" + SHM_WARNINGS
        + "[2025-01-01 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/srt/model_executor/model_runner.py", line 10, in f\n' + fatal + "\n"
    )
    d = triage_text(text)
    assert d.root_cause.category == category
    assert "shm" in {a.category for a in d.alternatives}


def test_nccls_own_warn_line_explains_its_vague_fatal_error():
    text = NCCL_SHM + (
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    )
    d = triage_text(text)
    assert d.root_cause.category == "shm"
    assert "nccl_distributed" in {a.category for a in d.alternatives}


def test_the_first_error_in_time_wins_when_processes_flush_out_of_order():
    text = (
        "(Worker_TP1 pid=9) ERROR 01-01 00:00:09 [x.py:1] ValueError: Total number of attention heads (52) "
        "must be divisible by tensor parallel size (8).\n"
        "(Worker_TP0 pid=8) ERROR 01-01 00:00:03 [x.py:1] RuntimeError: Cannot re-initialize CUDA in forked "
        "subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method\n"
        "(Worker_TP0 pid=8) ERROR 01-01 00:00:03 [x.py:1] ValueError: The quantization method fp8 is not "
        "supported for the current GPU. Minimum capability: 90. Current capability: 86.\n"
    )
    d = triage_text(text)
    # both known causes; the second line is stamped 6 s before the first
    assert (d.root_cause.category, d.root_cause.line) == ("quantization_support", 3)
    assert "tp_divisibility" in {a.category for a in d.alternatives}
    assert d.root_cause.confidence <= 0.7  # another known cause competes


def test_a_worker_killed_by_a_signal_explains_the_nccl_errors_of_its_peers():
    text = (
        "ERROR 08-17 23:28:45 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 1221546 died, exit code: -9\n"
        "(VllmWorkerProcess pid=1221547) ERROR 08-17 23:28:50 x.py:1] torch.distributed.DistBackendError: "
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, remote process exited or there "
        "was a network error\n"
    )
    d = triage_text(text)
    assert (d.root_cause.signature, d.root_cause.line) == ("worker-died-by-signal", 1)


def test_a_ray_actor_death_points_back_at_the_actors_own_error():
    text = (
        "(RayWorkerWrapper pid=20, ip=10.0.0.2) ERROR 04-24 16:06:40 worker_base.py:157] ValueError: The quantization "
        "method fp8 is not supported for the current GPU. Minimum capability: 90. Current capability: 86.\n"
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    )
    d = triage_text(text)
    assert d.root_cause.category == "quantization_support"
    assert any(e.signature == "ray-actor-died" for e in d.other_errors)


def test_a_vague_error_is_filed_by_the_frame_it_was_raised_in_with_a_low_confidence():
    # a bare KeyError matches only the generic transformers KeyError row; the ModelOpt frame
    # says it was the checkpoint's quantization config that lacked the key
    text = (
        "Traceback (most recent call last):\n"
        '  File "/sgl/srt/model_executor/model_runner.py", line 300, in load_model\n'
        '  File "/sgl/srt/layers/quantization/modelopt_quant.py", line 462, in from_config\n'
        "    quant_method = config['quantization']['quant_algo']\n"
        "KeyError: 'quantization'\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.category, rc.exception, rc.basis) == ("quantization_support", "KeyError", "frames")
    assert rc.message == "KeyError: 'quantization'" and rc.confidence < 0.5


def test_an_unknown_exception_is_filed_by_its_frame_too():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/vllm/v1/attention/backends/flashinfer.py", line 80, in __init__\n'
        "RuntimeError: no kernel for this sink configuration\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.category, rc.signature, rc.basis) == ("attention_backend", None, "frames")


def test_an_unknown_error_with_nothing_to_go_on_is_other_verbatim():
    rc = triage_text("Traceback (most recent call last):\nZeroDivisionError: division by zero\n").root_cause
    assert (rc.category, rc.signature, rc.exception) == ("other", None, "ZeroDivisionError")
    assert rc.message == "ZeroDivisionError: division by zero" and rc.confidence <= 0.3


def test_a_capture_hang_points_at_the_line_where_capture_began_not_its_last_tick():
    text = (
        "[2026-01-01 00:00:01] Load weight end. type=LlamaForCausalLM, avail mem=40.00 GB\n"
        "[2026-01-01 00:00:02] Memory pool end. avail mem=12.49 GB\n"
        "[2026-01-01 00:00:03] Capture cuda graph begin. This can take up to several minutes. avail mem=12.40 GB\n"
        "Capturing batches (bs=160 avail_mem=12.30 GB):  10%|#         | 4/36\n"
        "Capturing batches (bs=128 avail_mem=12.20 GB):  14%|#4        | 5/36\n"
    )
    rc = triage_text(text, engine="sglang").root_cause
    assert (rc.category, rc.basis) == ("cuda_graph", "stall")
    assert rc.line == 3 and "Capture cuda graph begin" in rc.message


def test_an_nccl_stall_keeps_the_last_step_nccl_reached():
    text = (
        "(Worker_TP0 pid=7) INFO 01-01 00:00:01 [pynccl.py:1] vLLM is using nccl==2.21.5\n"
        "host:7:7 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "host:7:7 [0] NCCL INFO Channel 00/02 : 0 1\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.category, rc.basis) == ("nccl_distributed", "stall")
    assert rc.line == 3


def test_a_metal_buffer_past_the_working_set_while_the_context_is_made_is_a_kv_cache_oom():
    text = (
        "ggml_metal_add_buffer: allocated 'data            ' buffer, size =  3648.00 MiB, ( 3650.00 /  4096.00)\n"
        "ggml_metal_add_buffer: allocated 'kv              ' buffer, size =   512.03 MiB, ( 4162.03 /  4096.00)\n"
        "ggml_metal_get_buffer: error: buffer is nil\n"
    )
    rc = triage_text(text).root_cause
    assert (rc.category, rc.line) == ("oom_kv_cache", 3)
    weights_only = (
        "ggml_metal_add_buffer: allocated 'data            ' buffer\nggml_metal_get_buffer: error: buffer is nil\n"
    )
    assert triage_text(weights_only).root_cause.category == "oom_weights"


def test_a_harness_that_gave_up_waiting_is_an_echo_of_the_stall_the_server_showed():
    text = (
        "[2026-01-01 00:00:01] server_args=ServerArgs(model_path='/m', tp_size=16, device='npu')\n"
        "[Gloo] Rank 7 is connected to 15 peer ranks. Expected number of connected peer ranks is : 15\n"
        "[Gloo] Rank 8 is connected to 14 peer ranks. Expected number of connected peer ranks is : 15\n"
        "[Gloo] Rank 8 is NOT connected to: [1]\n"
        "Traceback (most recent call last):\n"
        '  File "/x/sglang/test/test_utils.py", line 687, in popen_launch_server\n'
        '    raise TimeoutError("Server failed to start within the timeout period.")\n'
        "TimeoutError: Server failed to start within the timeout period.\n"
    )
    rc = triage_text(text, engine="sglang").root_cause
    assert (rc.category, rc.line) == ("nccl_distributed", 4)
    harness_only = text.replace("[Gloo] Rank 8 is NOT connected to: [1]\n", "")
    assert triage_text(harness_only, engine="sglang").root_cause.category == "other"
