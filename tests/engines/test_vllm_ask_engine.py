"""check --ask-engine: asking the installed vLLM itself, and every way that can fail to happen.

The engine is never required: without vLLM the asking is a note, never a crash. With a vLLM
environment named by SERVEPILOT_TEST_VLLM_PYTHON (or vLLM importable here) the real engine
is asked (a capability faked, no GPU, no weights).
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys

import pytest
import vllm_golden as G

from servepilot.checks import engine_answer
from servepilot.cli.main import main
from servepilot.engines.vllm import ask


def _script(tmp_path, body: str):
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_an_engine_python_that_is_not_there_is_a_note(tmp_path, capsys):
    root = G.models_root(str(tmp_path / "m"))
    argv = ["check", "--json", "--ask-engine", "--engine-python", str(tmp_path / "nope"), "--gpu", "h100",
            "--engine-version", "0.18.0", "--", "vllm", "serve", str(root / "llama-h128")]
    code = main(argv)
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["verdict"] == "pass"
    assert data["engine_answer"]["asked"] is False
    assert "not an executable" in data["engine_answer"]["note"]
    assert any("not an executable" in n for n in data["notes"])


def test_check_without_the_flag_has_no_engine_answer(tmp_path, capsys):
    root = G.models_root(str(tmp_path / "m"))
    main(["check", "--json", "--gpu", "h100", "--engine-version", "0.18.0", "--", "vllm", "serve",
          str(root / "llama-h128")])
    assert "engine_answer" not in json.loads(capsys.readouterr().out)


def test_a_python_without_vllm_is_a_note_not_a_crash(tmp_path):
    reply = ask.ask_engine([{"id": "x", "model": str(tmp_path), "args": []}], python=sys.executable, cc="9.0",
                           timeout_s=120) if importlib.util.find_spec("vllm") is None else None
    if reply is None:
        pytest.skip("vllm is importable here")
    assert reply.error and "ModuleNotFoundError" in reply.error and not reply.answers


def test_an_engine_that_hangs_is_stopped_at_the_timeout(tmp_path):
    marker = tmp_path / "child-alive"
    python = _script(tmp_path, f"touch {marker}; exec sleep 60")
    reply = ask.ask_engine([{"id": "x", "model": str(tmp_path), "args": []}], python=python, cc="9.0", timeout_s=2)
    assert reply.error and "did not answer within 2 s" in reply.error
    assert marker.exists()  # it did start, and was stopped


def test_an_engine_that_crashes_reports_its_last_words(tmp_path):
    python = _script(tmp_path, "echo 'ImportError: libcuda.so.1: cannot open shared object file' >&2; exit 3")
    reply = ask.ask_engine([{"id": "x", "model": str(tmp_path), "args": []}], python=python, cc="9.0", timeout_s=30)
    assert "exited with 3" in reply.error and "libcuda.so.1" in reply.error


def test_the_stub_driver_library_exports_what_vllm_links_against():
    stubs, why = ask.stub_driver_dir()
    if stubs is None:
        pytest.skip(why)
    import ctypes

    lib = ctypes.CDLL(str(stubs / "libcuda.so.1"))
    assert lib.cuInit(0) == 100  # CUDA_ERROR_NO_DEVICE


def test_a_disagreement_is_a_finding_and_the_engine_wins():
    answer = {"asked": True, "ok": True, "backend": "TRITON_ATTN", "kv_cache_dtype_final": "auto",
              "block_size_final": 16, "engine_version": "0.18.0", "has_sink": True,
              "environment": {"flashinfer_cubin": False, "nvidia_artifactory": False},
              "device": {"name": "NVIDIA B200", "capability": "10.0", "faked": True}}
    resolved = {"attention_backend": "FLASHINFER", "kv_cache_dtype": "auto", "block_size": 16}
    assert engine_answer.compare(answer, resolved) == ["attention backend: engine TRITON_ATTN, knowledge FLASHINFER"]
    assert engine_answer.compare(dict(answer, backend="FLASHINFER"), resolved) == []
    from servepilot.checks.result import CheckResult

    result = engine_answer.with_engine_answer(CheckResult("pass", (), resolved), answer)
    (finding,) = result.findings
    assert finding.code == "SP-ENGINE-001" and result.verdict == "warn"
    assert "artifactory reachable False" in finding.detail and "engine's answer wins" in finding.detail


def test_an_engine_refusal_fails_the_check():
    from servepilot.checks.result import CheckResult

    answer = {"asked": True, "ok": False, "stage": "config", "engine_version": "0.34.0",
              "error": 'ValueError: kv_cache_dtype="bfloat16" is incompatible with dtype="float16".'}
    resolved = {"attention_backend": "FLASH_ATTN", "kv_cache_dtype": "bfloat16", "block_size": 16}
    result = engine_answer.with_engine_answer(CheckResult("pass", (), resolved), answer)
    assert result.verdict == "fail" and result.findings[0].category == "kv_cache_dtype"
    assert "incompatible" in result.findings[0].detail


def _vllm_python():
    explicit = os.environ.get("SERVEPILOT_TEST_VLLM_PYTHON")
    if explicit:
        return explicit
    return sys.executable if importlib.util.find_spec("vllm") is not None else None


@pytest.mark.skipif(_vllm_python() is None, reason="no vLLM environment (set SERVEPILOT_TEST_VLLM_PYTHON)")
def test_the_real_engine_answers_like_its_stored_golden_answers(tmp_path):
    root = G.models_root(str(tmp_path / "m"))
    cases = {c["id"]: c for c in G.tool.cases(G.tool.load_grid())}
    ids = ["llama-h128|h100|bfloat16|fp8_e5m2|None", "dsv32-sparse-mla|b200|bfloat16|fp8|None",
           "dsv3-mla|h100|bfloat16|auto|16"]
    questions = [{"id": i, "model": str(root / cases[i]["model"]), "args": G.tool.engine_args(cases[i])}
                 for i in ids if cases[i]["gpu"] != "b200"]
    reply = ask.ask_engine(questions, python=_vllm_python(), cc="9.0", artifactory=True, timeout_s=600)
    assert reply.error is None, reply.error
    stored = G.DATA / f"vllm-{reply.engine_version}.jsonl.gz"
    if not stored.exists():
        pytest.skip(f"no stored answers for vLLM {reply.engine_version}")
    golden = G.tool.load_answers(stored)[1]
    for answer in reply.answers:
        want = golden[answer["id"]]
        assert (answer["backend"], answer["block_size_final"]) == (want["backend"], want["block_size_final"])
        assert answer["kv_cache_dtype_final"] == want.get("kv_cache_dtype_final")


def test_launch_preflight_asks_the_engine_too_and_notes_why_it_could_not(tmp_path):
    from servepilot.runs.launch import prepare_launch

    root = G.models_root(str(tmp_path / "m"))
    command = ["vllm", "serve", str(root / "llama-h128")]
    plan = prepare_launch(command, gpu="h100", engine_version="0.18.0", ask_engine=True,
                          engine_python=str(tmp_path / "no-such-python"))
    assert not plan.predicted_failure
    assert any("not an executable" in n for n in plan.check.notes)
    plain = prepare_launch(command, gpu="h100", engine_version="0.18.0")
    assert not any("engine was not asked" in n for n in plain.check.notes)


@pytest.mark.parametrize("command,flags", [
    (["vllm", "serve", "MODEL", "--kv-cache-dtype", "fp8"], ["--kv-cache-dtype", "fp8"]),
    (["vllm", "serve", "--port", "8000", "MODEL", "-tp", "2"], ["--port", "8000", "-tp", "2"]),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "MODEL", "--dtype",
      "half"], ["--dtype", "half"]),
])
def test_the_engine_gets_the_commands_flags_without_program_and_model(command, flags, tmp_path):
    from servepilot.deployment import build_deployment

    root = G.models_root(str(tmp_path / "m"))
    model = str(root / "llama-h128")
    dep = build_deployment([model if t == "MODEL" else t for t in command], gpu="h100", engine_version="0.18.0")
    assert engine_answer.engine_flags(dep.launch) == flags


def test_the_commands_environment_reaches_the_engine(tmp_path):
    out = tmp_path / "env-seen"
    python = _script(tmp_path, f'echo "$VLLM_HAS_FLASHINFER_CUBIN" > {out}; exit 1')
    ask.ask_engine([{"id": "x", "model": str(tmp_path), "args": []}], python=python, cc="10.0", timeout_s=30,
                   env={"VLLM_HAS_FLASHINFER_CUBIN": "1"})
    assert out.read_text().strip() == "1"


def test_an_engine_killed_while_writing_its_answers_is_an_error_not_a_crash(tmp_path):
    # the child is stopped (its memory cap, the OOM killer) with half its answers written
    python = _script(tmp_path, "printf '{\"engine_version\": \"0.1' > \"$3\"; "
                               "echo 'MemoryError' >&2; exit 1")
    reply = ask.ask_engine([{"id": "x", "model": str(tmp_path), "args": []}], python=python, timeout_s=30)
    assert reply.answers == []
    assert "exited with 1" in reply.error and "MemoryError" in reply.error
