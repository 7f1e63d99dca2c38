"""The README's main example (the Kimi-K2.5-NVFP4 check) from a Hub id on a fake Hub: the
same verdict and finding as from the bundled directory, and the overlay remedy says to
download first."""

from __future__ import annotations

import json
from pathlib import Path

from fake_hub import FakeRepo

from servepilot.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kimi-k2.5-nvfp4"
HUB_ID = "nvidia/Kimi-K2.5-NVFP4"
FLAGS = ["--tensor-parallel-size", "8", "--trust-remote-code", "--kv-cache-dtype", "auto"]
OPTIONS = ["--gpu", "rtx-pro-6000x8", "--engine-version", "0.16.0", "--json", "--"]


def _check(capsys, model: str) -> tuple[int, dict]:
    code = main(["check", *OPTIONS, "vllm", "serve", model, *FLAGS])
    return code, json.loads(capsys.readouterr().out)


def test_readme_check_from_a_hub_id_matches_the_local_directory(fake_hub, capsys):
    files = {p.name: p.read_bytes() for p in EXAMPLE.iterdir() if p.is_file()}
    fake_hub.add(HUB_ID, FakeRepo(files))
    local_code, local = _check(capsys, str(EXAMPLE))
    code, remote = _check(capsys, HUB_ID)
    assert (code, remote["verdict"]) == (local_code, local["verdict"]) == (1, "fail")
    codes = [(f["code"], f["category"], f["severity"]) for f in remote["findings"]]
    assert codes == [(f["code"], f["category"], f["severity"]) for f in local["findings"]]
    assert ("SP-ATTN-001", "kv_cache_dtype", "error") in codes
    assert remote["resolved"]["kv_cache_dtype"] == local["resolved"]["kv_cache_dtype"] == "fp8_e4m3"
    overlay = [r for f in remote["findings"] for r in f["remedies"] if r["kind"] == "overlay"]
    commit = fake_hub.repos[HUB_ID].commit
    assert overlay and all(r["change"].startswith(f"download first (hf download {HUB_ID} --revision {commit})")
                           for r in overlay)
    # Everything came from small files: the bundled example has no shards, the index is read whole.
    assert {r.path.rsplit("/", 1)[1] for r in fake_hub.file_requests()} <= set(files)


def test_overlay_remedy_on_a_hub_model_says_download_first(fake_hub, capsys):
    files = {p.name: p.read_bytes() for p in EXAMPLE.iterdir() if p.is_file()}
    fake_hub.add(HUB_ID, FakeRepo(files))
    code = main(["fix", "--gpu", "rtx-pro-6000x8", "--engine-version", "0.16.0", "--remedy", "3", "--dry-run",
                 "--", "vllm", "serve", HUB_ID, *FLAGS])
    captured = capsys.readouterr()
    assert code == 2
    commit = fake_hub.repos[HUB_ID].commit
    assert f"download it first: hf download {HUB_ID} --revision {commit}" in captured.err


def test_flag_remedy_and_plan_work_on_a_hub_id(fake_hub, capsys):
    files = {p.name: p.read_bytes() for p in EXAMPLE.iterdir() if p.is_file()}
    fake_hub.add(HUB_ID, FakeRepo(files))
    code = main(["fix", "--gpu", "rtx-pro-6000x8", "--engine-version", "0.16.0", "--remedy", "1", "--dry-run",
                 "--", "vllm", "serve", HUB_ID, *FLAGS])
    out = capsys.readouterr().out
    assert code == 0 and "--kv-cache-dtype bfloat16" in out
    assert f"vllm serve {HUB_ID}" in out  # the command keeps the Hub id, not servepilot's header view
    fake_hub.reset_counts()
    assert main(["plan", "--gpu", "rtx-pro-6000x8", "--engine-version", "0.16.0", "--json", "--",
                 "vllm", "serve", HUB_ID, *FLAGS]) in (0, 1)
    plan = json.loads(capsys.readouterr().out)
    assert plan["schema"].startswith("servepilot.plan/")
    assert fake_hub.model_requests() == []  # the second verb read the headers from the cache


def test_a_gated_hub_model_without_token_leaves_the_check_unknown_and_says_why(fake_hub, capsys):
    files = {p.name: p.read_bytes() for p in EXAMPLE.iterdir() if p.is_file()}
    fake_hub.add(HUB_ID, FakeRepo(files, gated=True))
    code, out = _check(capsys, HUB_ID)
    assert out["verdict"] == "unknown" and code == 4
    assert "gated" in json.dumps(out)
