"""`servepilot check` and `servepilot explain` through the real CLI entry point."""

from __future__ import annotations

import json
import re

import pytest
from checkfixtures import kimi_like, llama_like

from servepilot.cli.main import main


def _story(path, version: str, gpu: str = "rtx-pro-6000x8") -> list[str]:
    return ["check", "--gpu", gpu, "--engine-version", version, "--",
            "NCCL_PROTO=LL", "NCCL_P2P_LEVEL=SYS", "python3", "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(path), "--tensor-parallel-size", "8", "--tool-call-parser", "kimi_k2",
            "--reasoning-parser", "kimi_k2", "--trust-remote-code", "--kv-cache-dtype", "auto",
            "--port", "8000", "--disable-log-requests"]


def test_story_fails_with_exit_1_and_json_contract(tmp_path, capsys):
    path = kimi_like(tmp_path / "kimi")
    assert main(_story(path, "0.16.0")) == 1
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("verdict: FAIL")
    assert text.index("SP-ATTN-001") < text.index("SP-CODE-002") < text.index("vllm 0.16.0 will use")
    # what the engine will use comes after the findings, in words: no backend is valid
    used = text[text.index("vllm 0.16.0 will use"):]
    assert "fp8_e4m3" in used and "none valid" in used and "memory per GPU" in used
    assert main(["check", "--json"] + _story(path, "0.16.0")[1:]) == 1
    obj = json.loads(capsys.readouterr().out)
    assert list(obj)[:5] == ["schema", "verdict", "findings", "resolved", "plan"]
    assert obj["schema"] == "servepilot.check/1" and obj["verdict"] == "fail"
    first = obj["findings"][0]
    assert first["code"] == "SP-ATTN-001" and first["category"] == "kv_cache_dtype"
    assert [r["kind"] for r in first["remedies"]][:3] == ["flag", "upgrade", "overlay"]
    assert obj["resolved"]["kv_cache_dtype"] == "fp8_e4m3"


def test_story_on_018_resolves_triton_mla_fp8_and_refuses_only_the_removed_flag(tmp_path, capsys):
    # The story's command carries --disable-log-requests, which vLLM 0.18.0's parser no longer
    # has (read in the 0.18.0 sdist): the attention/KV problem is gone, the flag is the only error.
    path = kimi_like(tmp_path / "kimi")
    rc = main(["check", "--json"] + _story(path, "0.18.0")[1:])
    obj = json.loads(capsys.readouterr().out)
    errors = [f for f in obj["findings"] if f["severity"] == "error"]
    assert [f["code"] for f in errors] == ["SP-ARGS-001"]
    assert "--disable-log-requests" in errors[0]["detail"]
    assert errors[0]["remedies"][0]["args"]["unset"] == ["disable_log_requests"]
    assert obj["resolved"]["attention_backend"] == "TRITON_MLA" and obj["resolved"]["kv_cache_dtype"] == "fp8_e4m3"
    assert rc == 1


def test_story_on_018_without_the_removed_flag_has_no_error(tmp_path, capsys):
    path = kimi_like(tmp_path / "kimi")
    argv = [a for a in _story(path, "0.18.0")[1:] if a != "--disable-log-requests"]
    rc = main(["check", "--json"] + argv)
    obj = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in obj["findings"] if f["severity"] == "error"] == []
    assert rc == 0 and obj["verdict"] == "warn"
    assert obj["resolved"]["attention_backend"] == "TRITON_MLA" and obj["resolved"]["kv_cache_dtype"] == "fp8_e4m3"


def test_upgrade_remedy_names_flags_the_new_release_refuses(tmp_path, capsys):
    path = kimi_like(tmp_path / "kimi")
    main(["check", "--json"] + _story(path, "0.16.0")[1:])
    obj = json.loads(capsys.readouterr().out)
    (upgrade,) = [r for r in obj["findings"][0]["remedies"] if r["kind"] == "upgrade"]
    assert "drop --disable-log-requests" in upgrade["change"]
    assert upgrade["args"]["unset"] == ["disable_log_requests"]


def test_values_the_parser_refuses_fail_the_check(tmp_path, capsys):
    path = llama_like(tmp_path / "llama")
    rc = main(["check", "--json", "--gpu", "h100x1", "--engine-version", "0.16.0", "--", "vllm", "serve", str(path),
               "--max-model-len", "8192", "--max-num-seqs", "abc"])
    obj = json.loads(capsys.readouterr().out)
    assert rc == 1 and obj["findings"][0]["code"] == "SP-ARGS-001"
    assert "max-num-seqs" in obj["findings"][0]["detail"] or "max_num_seqs" in obj["findings"][0]["detail"]


def test_flags_are_not_refused_for_releases_servepilot_has_not_read(tmp_path, capsys):
    path = llama_like(tmp_path / "llama")
    main(["check", "--json", "--gpu", "h100x1", "--engine-version", "9.0.0", "--", "vllm", "serve", str(path),
          "--max-model-len", "8192", "--some-future-flag", "1"])
    obj = json.loads(capsys.readouterr().out)
    assert "SP-ARGS-001" not in {f["code"] for f in obj["findings"]}


def test_story_on_h200(tmp_path, capsys):
    path = kimi_like(tmp_path / "kimi")
    main(["check", "--json"] + _story(path, "0.16.0", gpu="h200x8")[1:])
    obj = json.loads(capsys.readouterr().out)
    assert obj["resolved"]["attention_backend"] == "FLASHMLA"
    assert obj["resolved"]["kv_cache_dtype"] == "fp8_e4m3"


def test_story_on_an_overlay_without_the_kv_scheme_passes(tmp_path, capsys):
    path = kimi_like(tmp_path / "kimi-overlay", kv_in_config=False, kv_in_hf_quant=False)
    main(["check", "--json"] + _story(path, "0.16.0")[1:])
    obj = json.loads(capsys.readouterr().out)
    assert obj["resolved"]["attention_backend"] == "TRITON_MLA" and obj["resolved"]["kv_cache_storage"] == "bfloat16"
    # attention and KV are fine; the only error left is the planner's: a 262,144-token
    # sequence of bf16 KV (70,272 B/token) does not fit beside 76 GB of weights per GPU
    errors = [f for f in obj["findings"] if f["severity"] == "error"]
    assert all(f["category"] in ("max_model_len", "oom_kv_cache") for f in errors), errors
    rc = main(["check", "--json"] + _story(path, "0.16.0")[1:] + ["--max-model-len", "131072"])
    obj = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in obj["findings"] if f["severity"] == "error"] == []
    assert rc == 0


def test_pass_exit_0(tmp_path, capsys):
    path = llama_like(tmp_path / "llama")
    rc = main(["check", "--gpu", "h100x1", "--engine-version", "0.16.0", "--", "vllm", "serve", str(path),
               "--max-model-len", "8192"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.startswith("verdict: PASS") or out.startswith("verdict: WARN")
    assert re.search(r"attention +FLASH_ATTN\b", out), out


def test_bad_engine_version_is_one_line_exit_2(tmp_path, capsys):
    path = llama_like(tmp_path / "llama")
    rc = main(["check", "--gpu", "h100x1", "--engine-version", "latest-ish", "--", "vllm", "serve", str(path)])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a version" in err


def test_explain(capsys):
    assert main(["explain", "sp-attn-001"]) == 0
    out = capsys.readouterr().out
    assert "SP-ATTN-001 (attention_backend)" in out and "https://github.com/vllm-project/vllm/pull/34597" in out
    assert main(["explain", "SP-KV-001", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["schema"] == "servepilot.explain/1" and obj["code"] == "SP-KV-001" and obj["sources"]


def test_explain_unknown_code(capsys):
    assert main(["explain", "SP-NOPE-999"]) == 2
    assert "no rule 'SP-NOPE-999'" in capsys.readouterr().err


@pytest.mark.parametrize("code", ["SP-ATTN-001", "SP-TP-001", "SP-CODE-001", "SP-QUANT-002", "SP-SHM-001"])
def test_every_rule_explains_itself(code, capsys):
    assert main(["explain", code, "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["facts"] and obj["sources"]


def test_explain_lists_the_rows_of_a_version(capsys):
    assert main(["explain", "SP-ATTN-001", "--engine-version", "0.16.0", "--json"]) == 0
    rows = {r["path"]: r for r in json.loads(capsys.readouterr().out)["knowledge"]}
    assert rows["backends.TRITON_MLA"]["facts"]["kv_cache_dtypes"] == ["auto", "bfloat16"]
    assert rows["backends.TRITON_MLA"]["source"].endswith("@v0.16.0")
    assert main(["explain", "SP-ATTN-001", "--engine-version", "0.18.0", "--json"]) == 0
    rows = {r["path"]: r for r in json.loads(capsys.readouterr().out)["knowledge"]}
    assert "fp8_e4m3" in rows["backends.TRITON_MLA"]["facts"]["kv_cache_dtypes"]
