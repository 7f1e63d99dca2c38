"""A PASS says what it could not see: facts only a start of the engine settles (`unchecked`)."""

from __future__ import annotations

import json

from checkfixtures import GIB, deployment, llama_like

from servepilot.checks import run_checks
from servepilot.cli.main import main


def _facts(result) -> list[str]:
    return [u.fact for u in result.unchecked]


def test_one_gpu_leaves_nothing_unchecked(tmp_path):
    result = run_checks(deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=1, version="0.16.0", memory=80 * GIB))
    assert result.verdict == "pass" and _facts(result) == []


def test_tensor_parallel_leaves_the_gpus_connection_unchecked_without_changing_the_verdict(tmp_path):
    result = run_checks(deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=4, version="0.16.0", memory=80 * GIB))
    assert _facts(result) == ["inter-GPU communication"]
    assert result.verdict in ("pass", "warn")  # the readable facts decide the verdict, as before
    assert "4 ranks" in result.unchecked[0].why and result.unchecked[0].settle


def test_ranks_on_other_nodes_leave_node_agreement_unchecked(tmp_path):
    dep = deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=8, version="0.16.0", memory=80 * GIB,
                     options={"tensor_parallel_size": 8, "pipeline_parallel_size": 2})
    assert _facts(run_checks(dep)) == ["inter-GPU communication", "node agreement"]


def test_cli_prints_and_serialises_what_was_not_checked(tmp_path, capsys):
    path = llama_like(tmp_path / "m")
    argv = ["check", "--gpu", "h100x2", "--engine-version", "0.16.0", "--",
            "vllm", "serve", str(path), "--tensor-parallel-size", "2", "--max-model-len", "8192"]
    rc = main(argv)
    text = capsys.readouterr().out
    assert rc == 0 and text.startswith(("verdict: PASS", "verdict: WARN"))
    assert "[not checked before launch] inter-GPU communication" in text
    assert main(["check", "--json"] + argv[1:]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert [u["fact"] for u in obj["unchecked"]] == ["inter-GPU communication"]


def test_a_failing_launch_prints_no_caveat(tmp_path, capsys):
    path = llama_like(tmp_path / "m", heads=40, kv_heads=8)
    rc = main(["check", "--gpu", "h100x3", "--engine-version", "0.16.0", "--",
               "vllm", "serve", str(path), "--tensor-parallel-size", "3"])
    assert rc == 1 and "[not checked before launch]" not in capsys.readouterr().out
