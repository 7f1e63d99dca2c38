"""Errors no signature knows are still named, verbatim, from the line they rest on.

Lines from public reports (URLs on each case); none of them matches a signature, so each
must come back as the root cause through the generic error-line rules, not be dropped.
"""

from __future__ import annotations

import pytest

from servepilot.triage import triage_text
from servepilot.triage.lines import parse_line

CASES = [
    # libstdc++'s report of an uncaught C++ exception (ggml-org/llama.cpp#17334)
    ("llama.cpp", "load_tensors: offloaded 33/33 layers to GPU\n"
     "terminate called after throwing an instance of 'vk::DeviceLostError'\n"
     "  what():  vk::Queue::submit: ErrorDeviceLost\n",
     # the exception's own message is the error (the corpus row's root-cause line)
     "what():  vk::Queue::submit: ErrorDeviceLost"),
    # GGML_ABORT's "file:line: message" (a llama-server build inside Atomic Chat, issue 44)
    ("llama.cpp", "main: loading model\ntools/mtmd/clip.cpp:4391: Unknown projector type\nggml_abort\n",
     "tools/mtmd/clip.cpp:4391: Unknown projector type"),
    # a program refusing its command line (llama-box under GPUStack; ollama-musa issue 15)
    ("llama.cpp", "I load_backend: loaded CPU backend\nUnknown argument: --origin-rpc-server-main-gpu\n",
     "Unknown argument: --origin-rpc-server-main-gpu"),
    # a C error code in a plain line (ollama/ollama#6647)
    ("llama.cpp", "cudaSetDevice err: 999\n", "cudaSetDevice err: 999"),
]


@pytest.mark.parametrize("engine, log, line", CASES, ids=[c[2][:40] for c in CASES])
def test_an_unknown_error_line_is_the_root_cause_verbatim(engine, log, line):
    d = triage_text(log, engine=engine)
    assert d.root_cause is not None, log
    assert _named(log, d.root_cause) == line.strip()
    assert d.root_cause.message.strip() in line


def _named(log: str, cause) -> str:
    return log.split("\n")[cause.line - 1].strip()


def test_a_healthy_line_with_such_words_is_no_error():
    d = triage_text("INFO 01-01 10:00:00 [api_server.py:1] argument parsing done\n"
                    "INFO:     Application startup complete.\n", engine="vllm")
    assert d.root_cause is None


def test_go_slog_lines_are_split_into_level_source_and_message():
    # ollama's log format (ollama-for-amd installer issue 12)
    ll = parse_line('time=2025-07-29T13:31:47.016+02:00 level=WARN source=amd_windows.go:138 '
                    'msg="amdgpu is not supported (supported types:[])" gpu_type=gfx1100 gpu=0')
    assert (ll.level, ll.source) == ("WARNING", "amd_windows.go:138")
    assert ll.message == "amdgpu is not supported (supported types:[]) gpu_type=gfx1100 gpu=0"


def test_a_refusing_warning_is_named_when_nothing_worse_happened():
    log = ('time=2025-07-29T13:31:46.647+02:00 level=INFO source=amd_windows.go:70 msg="skipping check"\n'
           'time=2025-07-29T13:31:47.016+02:00 level=WARN source=amd_windows.go:138 '
           'msg="amdgpu is not supported (supported types:[])" gpu_type=gfx1100 gpu=0\n'
           'time=2025-07-29T13:31:47.017+02:00 level=INFO source=gpu.go:377 msg="no compatible GPUs were discovered"\n')
    d = triage_text(log, engine="llama.cpp")
    assert d.root_cause is not None and "amdgpu is not supported" in _named(log, d.root_cause)
    assert d.root_cause.confidence < 0.9  # a guess from a warning, said as such


def test_a_fatal_error_outranks_a_refusing_warning():
    log = ("WARNING 01-01 10:00:00 [config.py:1] fp8 is not supported on this GPU, using bf16\n"
           "ERROR 01-01 10:00:01 [core.py:2] EngineCore failed to start.\n"
           "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
           "that can be stored in KV cache (1000).\n")
    d = triage_text(log, engine="vllm")
    assert d.root_cause is not None and _named(log, d.root_cause).startswith("ValueError")


def test_a_process_that_dies_right_after_readiness_is_blamed():
    # parallelworks/activate-rag-vllm vllm.out (corpus full log): the engine core says it is
    # up, then the API server dies in init_app_state with its traceback as the log's end
    p = "(APIServer pid=21) "
    log = "\n".join([
        "(EngineCore_DP0 pid=32) INFO 02-09 12:47:07 [core.py:1] init engine (profile, create kv cache, "
        "warmup model) took 78.45 seconds",
        p + "INFO 02-09 12:47:08 [api_server.py:665] Supported tasks: ['generate']",
        p + "Traceback (most recent call last):",
        p + '  File "<frozen runpy>", line 198, in _run_module_as_main',
        p + '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py", line 700, '
            "in init_app_state",
        p + "openai_harmony.HarmonyError: invalid tiktoken vocab file: hash mismatch",
        "",
    ])
    d = triage_text(log, engine="vllm")
    assert d.root_cause is not None and d.root_cause.exception == "openai_harmony.HarmonyError"
    # the same traceback with the server going on serving after it is a survived error
    serving = log + "\n".join([p + "INFO 02-09 12:47:09 [launcher.py:1] Route: /health"] * 4) + "\n"
    assert triage_text(serving, engine="vllm").root_cause is None


@pytest.mark.parametrize("text", [
    # one-line errors as reporters give them (sgl-project/sglang mineru-3416 report line;
    # vllm-project/vllm#8388's title), no level, no exception class, no "error" word
    "SGlang only supports sm 75 and above\n",
    'assert "factor" in rope_scaling',
])
def test_a_one_line_text_with_no_marker_is_taken_as_the_error_as_given(text):
    d = triage_text(text)
    assert d.root_cause is not None and d.root_cause.line == 1
    assert d.root_cause.basis == "sole-line" and d.root_cause.confidence < 0.3
    assert d.root_cause.message == text.strip()


@pytest.mark.parametrize("text", [
    "INFO 01-01 10:00:00 [loader.py:1] Loading weights took 3.2 s\n",  # a status line
    "SGlang only supports sm 75 and above\nand a second line\n",  # more than one line: no guess
])
def test_no_sole_line_guess_on_status_lines_or_longer_texts(text):
    d = triage_text(text)
    assert d.root_cause is None or d.root_cause.basis != "sole-line"


def test_a_supervised_runs_lone_quiet_line_is_no_failure_but_a_users_file_is_guessed(tmp_path):
    # the log of a run servepilot supervised is whole: "exiting with 0" alone is not an error;
    # the same one line handed to `triage` by a user is what they call the error
    from servepilot.triage import triage_file

    log = tmp_path / "server.log"
    log.write_text("fake engine: exiting with 0\n")
    assert triage_file(log).root_cause is None
    guessed = triage_file(log, guess_sole_line=True).root_cause
    assert guessed is not None and guessed.basis == "sole-line"
