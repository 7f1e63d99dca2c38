"""`servepilot triage`: exit codes, text order and the JSON contract."""

from __future__ import annotations

import json

from servepilot.cli.main import main

FAILED = (
    "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.16.0\n"
    "(Worker_TP0 pid=7) ERROR 01-01 00:00:05 [multiproc_executor.py:751] "
    "ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8).\n"
    "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
)
HEALTHY = (
    "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.16.0\n"
    "INFO:     Application startup complete.\n"
)


def test_root_cause_exits_1_and_prints_cause_then_fixes_then_other_errors(tmp_path, capsys):
    log = tmp_path / "vllm.log"
    log.write_text(FAILED)
    assert main(["triage", str(log)]) == 1
    out = capsys.readouterr().out
    assert out.index("root cause") < out.index("fixes") < out.index("other errors")
    assert "tp_divisibility" in out and "line 2" in out
    assert "[flag]" in out  # the remedy kind is printed, not eaten as markup


def test_healthy_start_exits_0(tmp_path, capsys):
    log = tmp_path / "ok.log"
    log.write_text(HEALTHY)
    assert main(["triage", str(log)]) == 0
    assert "healthy start" in capsys.readouterr().out


def test_json_contract(tmp_path, capsys):
    log = tmp_path / "vllm.log"
    log.write_text(FAILED)
    assert main(["triage", str(log), "--json", "--engine", "vllm"]) == 1
    obj = json.loads(capsys.readouterr().out)
    assert list(obj)[:5] == ["schema", "root_cause", "remedies", "other_errors", "stale"]
    assert obj["schema"] == "servepilot.triage/1"
    rc = obj["root_cause"]
    for key in ("category", "signature", "line", "process", "excerpt", "explanation", "count", "processes"):
        assert key in rc
    assert (rc["category"], rc["line"], rc["process"]) == ("tp_divisibility", 2, "Worker_TP0")
    assert obj["remedies"][0]["kind"] in ("flag", "overlay", "upgrade", "hardware", "env")
    assert obj["stale"] is False


def test_missing_file_exits_2_with_one_line(tmp_path, capsys):
    assert main(["triage", str(tmp_path / "nope.log")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.log" in err[0]


def test_directory_exits_2(tmp_path, capsys):
    assert main(["triage", str(tmp_path)]) == 2
    assert "directory" in capsys.readouterr().err
