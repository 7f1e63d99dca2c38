"""parse_line: the prefixes engines put on a line, and what is left as the message."""

import pytest

from servepilot.triage.lines import clean_text, parse_line


def test_vllm_v016_worker_prefix_and_logging_format():
    ll = parse_line(
        "(Worker_TP4 pid=207083) ERROR 12-29 15:21:11 [multiproc_executor.py:751] ValueError: boom"
    )
    assert (ll.process, ll.pid, ll.level) == ("Worker_TP4", 207083, "ERROR")
    assert ll.timestamp == "12-29 15:21:11"
    assert ll.source == "multiproc_executor.py:751"
    assert ll.message == "ValueError: boom"


def test_ansi_colours_are_stripped_before_parsing():
    ll = parse_line("\x1b[36m(EngineCore_DP0 pid=12)\x1b[0m \x1b[1;31mERROR\x1b[0m 01-02 03:04:05 [core.py:1] x")
    assert ll.text.startswith("(EngineCore_DP0 pid=12) ERROR")
    assert (ll.process, ll.level, ll.message) == ("EngineCore_DP0", "ERROR", "x")


def test_progress_bar_keeps_the_last_carriage_return_segment():
    raw = "Loading shards:  10% |#   |\rLoading shards:  50% |##  |\rLoading shards: 100% |####|\n"
    assert clean_text(raw) == "Loading shards: 100% |####|"
    assert parse_line(raw).message == "Loading shards: 100% |####|"


@pytest.mark.parametrize(
    ("raw", "process", "pid"),
    [
        ("(VllmWorker TP0 pid=3974) INFO 01-02 10:00:00 [gpu_worker.py:1] hi", "VllmWorker TP0", 3974),
        ("(RayWorkerWrapper pid=55, ip=10.0.0.2) ERROR 01-02 10:00:00 [worker_base.py:2] hi", "RayWorkerWrapper", 55),
        (
            "vllm  | (Worker_TP1 pid=77) ERROR 10-08 09:19:30 [v1/executor/multiproc_executor.py:671] hi",
            "Worker_TP1",
            77,
        ),
        ("pod-6c78t modelserver (EngineCore pid=1122) ERROR 09-19 19:20:03 [core.py:1378] hi", "EngineCore", 1122),
        # excerpts pasted into issues often lose the opening bracket
        ("Worker_TP3_EP3 pid=18935) ERROR 08-06 14:55:55 [multiproc_executor.py:898] hi", "Worker_TP3_EP3", 18935),
    ],
)
def test_process_prefix_forms(raw, process, pid):
    ll = parse_line(raw)
    assert (ll.process, ll.pid, ll.message) == (process, pid, "hi")


def test_v034_prefix_inside_the_format_after_a_docker_timestamp():
    ll = parse_line("2025-01-01T10:00:00.123Z (APIServer pid=1) INFO 01-01 10:00:00 [api_server.py:1] hello")
    assert (ll.process, ll.pid, ll.level, ll.message) == ("APIServer", 1, "INFO", "hello")


def test_a_scripts_level_inside_sglangs_bracket_is_read_after_a_docker_timestamp():
    # logging.basicConfig's "[%(asctime)s] %(levelname)s %(filename)s:%(lineno)d:" under
    # `docker logs -t`: the INFO line dumping ServerArgs stays status, as without the stamp
    # (as in https://github.com/caleboverman/llmsys_f25_hw6/blob/
    # f02433a1385825b731037781ec899fb2162a76ab/sglang_log.txt, with a docker stamp added)
    ll = parse_line(
        "2025-11-23T23:34:08.100Z [2025-11-23 23:34:08] INFO engine.py:123: "
        "server_args=ServerArgs(trust_remote_code=True)"
    )
    assert (ll.level, ll.source) == ("INFO", "engine.py:123")
    assert ll.message == "server_args=ServerArgs(trust_remote_code=True)"


def test_kubectl_prefix_before_a_vllm_line():
    # `kubectl logs --prefix`: "[pod/<pod>/<container>] " before the engine's own line
    ll = parse_line(
        "[pod/vllm-0/vllm] (EngineCore_DP0 pid=263) ERROR 06-27 01:37:15 [core.py:1006] "
        "KeyError: 'layers.5.self_attn.qkv_proj.v_proj.weight'"
    )
    assert (ll.process, ll.pid, ll.level) == ("EngineCore_DP0", 263, "ERROR")
    assert ll.source == "core.py:1006"
    assert ll.message == "KeyError: 'layers.5.self_attn.qkv_proj.v_proj.weight'"


@pytest.mark.parametrize(
    "prefix",
    [
        "2026-06-10T07:31:04+0000 gpu-node sglang[1234]: ",  # journalctl -o short-iso
        "0: ",  # srun --label
        " 3: ",  # srun --label, padded to the widest task number
    ],
)
def test_journald_iso_and_srun_label_prefixes_before_sglangs_line(prefix):
    ll = parse_line(f"{prefix}[2026-03-27 09:31:49 TP0] Capture cuda graph begin.")
    assert (ll.process, ll.timestamp) == ("TP0", "2026-03-27 09:31:49")
    assert ll.message == "Capture cuda graph begin."


def test_an_srun_label_keeps_a_traceback_frames_indentation():
    ll = parse_line('0:   File "/py/sglang/srt/managers/scheduler.py", line 3922, in run_scheduler')
    assert ll.message.startswith('File "/py/sglang')
    assert ll.text.startswith("0:   File")


def test_a_docker_timestamp_before_torchs_rank_and_glog_prefixes():
    # `docker logs -t` before torch's "[rank3]:E1128 ... file:line] [24/0] msg" (torch/_logging):
    # the line is read as printed, with the outer stamp (the nightly CI server log in
    # https://github.com/michael-amd/sglang-ci, online_benchmark_log/.../sglang_server.log)
    ll = parse_line(
        "2025-11-28T09:51:39.357Z [rank3]:E1128 09:51:39.357000 208 "
        "torch/_inductor/runtime/triton_heuristics.py:750] [24/0] "
        "RuntimeError: PassManager::run failed"
    )
    assert (ll.process, ll.level, ll.timestamp) == ("rank3", "ERROR", "2025-11-28T09:51:39.357Z")
    assert ll.message == "RuntimeError: PassManager::run failed"


def test_a_docker_timestamp_before_a_compilers_diagnostic_is_no_journald_host():
    # nvcc's "file(117): error: msg" after a stamp: no host and pid, so nothing is cut from it
    ll = parse_line(
        "2026-06-10T07:31:04Z /py/flashinfer/vec_dtypes.cuh(117): error: no suitable conversion"
    )
    assert ll.message == "/py/flashinfer/vec_dtypes.cuh(117): error: no suitable conversion"


def test_old_vllm_format_without_opening_bracket():
    ll = parse_line("INFO 04-19 17:25:10 api_server.py:149] vLLM API server version 0.4.0.post1")
    assert (ll.level, ll.source, ll.message) == ("INFO", "api_server.py:149", "vLLM API server version 0.4.0.post1")


@pytest.mark.parametrize(
    ("raw", "process", "ts"),
    [
        ("[2025-01-01 10:00:00 TP3] Load weight begin", "TP3", "2025-01-01 10:00:00"),
        ("[2025-01-01 10:00:00 DP1 TP3] Load weight begin", "DP1 TP3", "2025-01-01 10:00:00"),
        ("[2025-01-01 10:00:00] Load weight begin", None, "2025-01-01 10:00:00"),
        ("[12-16 14:27:08 TP0] Load weight begin", "TP0", "12-16 14:27:08"),
        (
            # a launcher's logger around SGLang's line: its stamp is the one every line carries
            "2025-03-07 23:50:27,531 - __main__ - INFO - [2025-03-07 23:50:27 TP0] Load weight begin",
            "TP0",
            "2025-03-07 23:50:27,531",
        ),
        (
            # `docker logs -t` (RFC 3339, UTC) around SGLang's local-time stamp: one clock for
            # every line, the lines SGLang did not stamp included
            "2026-06-07T09:49:21.004Z [2026-06-07 18:49:21] Load weight begin",
            None,
            "2026-06-07T09:49:21.004Z",
        ),
    ],
)
def test_sglang_rank_inside_the_timestamp_bracket(raw, process, ts):
    ll = parse_line(raw)
    assert (ll.process, ll.timestamp, ll.message) == (process, ts, "Load weight begin")


def test_a_level_and_source_after_the_timestamp_bracket_are_read():
    # A script's own logging.basicConfig around SGLang's offline Engine:
    # `[%(asctime)s] %(levelname)s %(filename)s:%(lineno)d: %(message)s`.
    ll = parse_line("[2025-11-23 23:34:08] INFO engine.py:123: server_args=ServerArgs(dtype='auto')")
    assert (ll.level, ll.source, ll.message) == ("INFO", "engine.py:123", "server_args=ServerArgs(dtype='auto')")
    # SGLang's own format has no level: a message is left whole
    assert parse_line("[2025-11-23 23:34:08 TP0] Load weight end.").level is None


def test_an_info_line_dumping_server_args_is_no_failure():
    from servepilot.triage.api import triage_text

    # the shape of a healthy offline run's log (a public homework repository's sglang_log.txt)
    text = (
        "(py312) [user@node sglang]$ python run_sglang.py\n"
        "[2025-11-23 23:34:08] WARNING server_args.py:1359: Mixed chunk and radix cache are disabled"
        " when using dual-chunk flash attention backend\n"
        "[2025-11-23 23:34:08] INFO engine.py:123: server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B'"
        ", trust_remote_code=True, context_length=None)\n"
    )
    cause = triage_text(text).root_cause
    assert cause is None or cause.category != "remote_code"


def test_llama_cpp_function_prefix_is_the_source():
    ll = parse_line("llama_model_load: error loading model: unknown model architecture: 'x'")
    assert ll.source == "llama_model_load"
    assert "error loading model" in ll.message
    assert parse_line("srv  load_model: failed to load model").source == "srv load_model"


def test_uvicorn_level_prefix():
    ll = parse_line(
        "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use"
    )
    assert ll.level == "ERROR"
    assert ll.message.startswith("[Errno 98]")


def test_plain_python_lines_keep_their_text():
    ll = parse_line('  File "/x/y.py", line 3, in f\n')
    assert ll.process is None and ll.level is None
    assert ll.message == 'File "/x/y.py", line 3, in f'


def test_replacement_characters_and_control_bytes_do_not_break_parsing():
    ll = parse_line("\ufffd\ufffd\x00\x07 (Worker_TP0 pid=1) ERROR 01-01 00:00:00 [a.py:1] ok\ufffd")
    assert ll.process == "Worker_TP0"
    assert ll.message == "ok\ufffd"
    junk = parse_line("\ufffd\x00\x1b[\x1b]\r\r\x7f\ufffd")
    assert junk.process is None and junk.level is None


def test_journald_prefix_is_removed_before_the_engine_prefixes():
    ll = parse_line("Oct 02 22:13:46 HNET00 serve.sh[457499]: (EngineCore pid=457499) RuntimeError: x")
    assert (ll.process, ll.pid, ll.message) == ("EngineCore", 457499, "RuntimeError: x")
    ll = parse_line("Feb 21 01:41:16 host ollama[402476]: llama_model_load: error loading model: boom")
    assert ll.source == "llama_model_load"
