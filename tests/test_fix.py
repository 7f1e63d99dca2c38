"""`fix`: which remedy is chosen, and what applying it does to the command and the checkpoint."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from servepilot.checks.finding import Finding, Remedy
from servepilot.cli.main import main
from servepilot.deployment import Deployment
from servepilot.engines.command import EngineLaunch, ShellContext
from servepilot.errors import BadInput
from servepilot.fix import choose_remedy, remedy_options, served_model_name
from servepilot.hardware.cluster import Cluster

KV_OVERLAY = {"overlay": {"config.json": [{"op": "remove", "path": "/quantization_config/kv_cache_scheme"}]}}


def launch(**kw) -> EngineLaunch:
    base = dict(engine="vllm", argv=("vllm", "serve", "/m"), program="vllm serve", model="/m")
    base.update(kw)
    return EngineLaunch(**base)


def dep_for(tmp_path, **kw) -> Deployment:
    from servepilot.checkpoint.spec import ModelSpec

    ckpt = tmp_path / "m"
    ckpt.mkdir(exist_ok=True)
    return Deployment(launch=launch(**kw), cluster=Cluster(), spec=ModelSpec(path=str(ckpt), format="hf"))


def finding(code, severity, *remedies) -> Finding:
    return Finding(code=code, category="other", severity=severity, title=f"title {code}", detail="", remedies=remedies)


HARDWARE = Remedy("hardware", "use H200 GPUs", "buy GPUs")
FLAG = Remedy("flag", "--kv-cache-dtype bfloat16", "KV doubles", {"set": {"kv_cache_dtype": "bfloat16"}, "unset": []})
OVERLAY = Remedy("overlay", "drop kv_cache_scheme", "KV doubles", KV_OVERLAY)
UPGRADE = Remedy("upgrade", "pip install 'vllm>=0.18.0'", "new engine",
                 {"upgrade": {"package": "vllm", "specifier": ">=0.18.0"}})


def test_default_is_top_applicable_remedy_of_first_error_with_one(tmp_path):
    findings = [
        finding("SP-W", "warning", FLAG),
        finding("SP-HW", "error", HARDWARE),  # nothing servepilot can do: skipped
        finding("SP-KV", "error", HARDWARE, OVERLAY, FLAG),
    ]
    chosen = choose_remedy(tuple(remedy_options(dep_for(tmp_path), findings)), None, None)
    assert (chosen.finding, chosen.number, chosen.kind) == ("SP-KV", 2, "overlay")


def test_remedy_number_indexes_the_chosen_findings_list(tmp_path):
    findings = [finding("SP-KV", "error", OVERLAY, FLAG, UPGRADE)]
    options = tuple(remedy_options(dep_for(tmp_path), findings))
    assert choose_remedy(options, 3, None).kind == "upgrade"
    assert choose_remedy(options, 2, None).kind == "flag"
    with pytest.raises(BadInput, match="has 3 remedies"):
        choose_remedy(options, 4, None)
    with pytest.raises(BadInput, match="numbered from 1"):
        choose_remedy(options, 0, None)


def test_a_hardware_remedy_cannot_be_chosen_by_number(tmp_path):
    options = tuple(remedy_options(dep_for(tmp_path), [finding("SP-KV", "error", HARDWARE, FLAG)]))
    with pytest.raises(BadInput, match="cannot be applied"):
        choose_remedy(options, 1, None)


def test_finding_code_selects_warnings_too_and_unknown_codes_are_named(tmp_path):
    options = tuple(remedy_options(dep_for(tmp_path),
                                   [finding("SP-W", "warning", FLAG), finding("SP-E", "error", HARDWARE)]))
    assert choose_remedy(options, None, None) is None  # the only error has no applicable remedy
    assert choose_remedy(options, None, "SP-W").finding == "SP-W"
    with pytest.raises(BadInput, match="SP-E, SP-W"):
        choose_remedy(options, None, "SP-NOPE")


def test_overlay_is_not_applicable_for_a_remote_or_unreadable_checkpoint(tmp_path):
    remote = dep_for(tmp_path, shell=ShellContext(ssh_host="root@gpu-box"))
    (opt,) = remedy_options(remote, [finding("SP-KV", "error", OVERLAY)])
    assert not opt.applicable and "gpu-box" in opt.why_not
    unreadable = Deployment(launch=launch(), cluster=Cluster(), spec=None)
    (opt,) = remedy_options(unreadable, [finding("SP-KV", "error", OVERLAY)])
    assert not opt.applicable and "not readable" in opt.why_not
    from servepilot.checkpoint.spec import ModelSpec

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    single = Deployment(launch=launch(), cluster=Cluster(), spec=ModelSpec(path=str(gguf), format="gguf"))
    (opt,) = remedy_options(single, [finding("SP-KV", "error", OVERLAY)])
    assert not opt.applicable and "single file" in opt.why_not


def test_served_model_name_keeps_what_clients_use():
    assert served_model_name(launch(model="moonshotai/Kimi-K2.5")) == "moonshotai/Kimi-K2.5"
    # a name the operator gave stays as typed (with_model leaves it alone when given None)
    assert served_model_name(launch(options={"served_model_name": ["kimi", "k2"]})) is None
    assert served_model_name(launch(engine="llama.cpp", model="m.gguf", options={"alias": "tiny"})) is None
    assert served_model_name(launch(engine="llama.cpp", model="m.gguf")) == "m.gguf"


# ---- the story, end to end through the CLI ------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kimi-k2.5-nvfp4"
TARGET = ["--gpu", "rtx-pro-6000x8", "--engine-version", "0.16.0"]


def story_command(model: Path) -> list[str]:
    return [
        "NCCL_PROTO=LL", "NCCL_P2P_LEVEL=SYS", "python3", "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--tensor-parallel-size", "8", "--tool-call-parser", "kimi_k2",
        "--reasoning-parser", "kimi_k2", "--trust-remote-code", "--kv-cache-dtype", "auto",
        "--port", "8000", "--disable-log-requests",
    ]


def tree_state(root: Path) -> dict:
    """Content hash plus inode/size/mtime/ctime of every entry: any write would change one."""
    out = {}
    for here, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            p = Path(here) if name == "." else Path(here, name)
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None
            out[p.relative_to(root).as_posix()] = (digest, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return out


@pytest.fixture
def kimi(tmp_path):
    """A read-only copy of the example checkpoint (tests run as root: chmod alone proves nothing,
    so `tree_state` is compared too)."""
    model = tmp_path / "models" / "kimi-k2.5-nvfp4"
    shutil.copytree(EXAMPLE, model)
    for p in [model, *model.iterdir()]:
        p.chmod(p.stat().st_mode & ~0o222)
    yield model
    for p in [model, *model.iterdir()]:
        p.chmod(p.stat().st_mode | 0o200)


def run_json(capsys, argv) -> tuple[int, dict]:
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


def overlay_remedy_number(capsys, model) -> tuple[str, int]:
    rc, check = run_json(capsys, ["check", "--json", *TARGET, "--", *story_command(model)])
    assert rc == 1 and check["verdict"] == "fail"
    for f in check["findings"]:
        for i, r in enumerate(f["remedies"], start=1):
            if r["kind"] == "overlay" and r["args"]:
                return f["code"], i
    raise AssertionError("check offered no overlay remedy for the story command")


def test_story_overlay_fix_resolves_triton_mla_with_bf16_and_leaves_the_original_alone(kimi, tmp_path, capsys):
    before = tree_state(kimi)
    code, number = overlay_remedy_number(capsys, kimi)
    script = tmp_path / "serve.sh"

    rc, out = run_json(
        capsys, ["fix", "--json", "--remedy", str(number), "--write", str(script), *TARGET, "--", *story_command(kimi)]
    )
    assert list(out)[0] == "schema" and out["schema"] == "servepilot.fix/1"
    assert (out["applied"]["finding"], out["applied"]["kind"]) == (code, "overlay")
    overlay = Path(out["overlay"]["path"])
    assert overlay.parent == kimi.parent and overlay.name.startswith("kimi-k2.5-nvfp4-servepilot-")
    config = json.loads((overlay / "config.json").read_text())
    assert "kv_cache_scheme" not in config["quantization_config"]
    assert config["quantization_config"]["quant_algo"] == "NVFP4"
    quant = json.loads((overlay / "hf_quant_config.json").read_text())
    assert "kv_cache_quant_algo" not in quant["quantization"]
    assert quant["quantization"]["quant_algo"] == "NVFP4"

    # the new command serves the overlay under the name clients already use
    assert f"--model {overlay}" in out["new_command"]
    assert f"--served-model-name {kimi}" in out["new_command"]
    assert out["new_command"].startswith("NCCL_PROTO=LL NCCL_P2P_LEVEL=SYS ")
    assert out["new_command"] in script.read_text()
    assert os.access(script, os.X_OK)
    assert out["new_resolved"]["attention_backend"] == "TRITON_MLA"
    assert out["new_resolved"]["kv_cache_storage"] == "bfloat16"
    assert code not in {f["code"] for f in out["new_findings"]}

    # `check` on the written script agrees: the attention/KV failure is gone
    rc, check = run_json(capsys, ["check", "--json", *TARGET, "--command-file", str(script)])
    assert check["resolved"]["attention_backend"] == "TRITON_MLA"
    assert check["resolved"]["kv_cache_storage"] == "bfloat16"
    assert check["verdict"] in ("pass", "warn") and rc == 0
    assert not [f["code"] for f in check["findings"] if f["severity"] == "error"]

    # status, diff and remove, and the original never changed
    assert main(["overlay", "status", str(overlay)]) == 0
    assert main(["overlay", "diff", str(overlay)]) == 0
    assert "kv_cache_quant_algo" in capsys.readouterr().out
    assert main(["overlay", "remove", str(overlay)]) == 0
    assert not overlay.exists()
    assert tree_state(kimi) == before


def test_default_remedy_is_the_flag_and_builds_nothing(kimi, capsys):
    rc, out = run_json(capsys, ["fix", "--json", *TARGET, "--", *story_command(kimi)])
    assert out["applied"]["kind"] == "flag"
    assert out["overlay"] is None
    assert "--kv-cache-dtype bfloat16" in out["new_command"]
    assert "--kv-cache-dtype auto" not in out["new_command"]
    assert out["new_resolved"]["attention_backend"] == "TRITON_MLA"
    assert sorted(p.name for p in kimi.parent.iterdir()) == ["kimi-k2.5-nvfp4"]


def test_env_remedy_changes_the_env_prefix(kimi, capsys):
    rc, check = run_json(capsys, ["check", "--json", *TARGET, "--", *story_command(kimi)])
    env_findings = [f["code"] for f in check["findings"]
                    if any(r["kind"] == "env" and r["args"] for r in f["remedies"])]
    assert env_findings, "the story command's NCCL_PROTO=LL should draw an env remedy"
    rc, out = run_json(capsys, ["fix", "--json", "--finding", env_findings[0], *TARGET, "--", *story_command(kimi)])
    assert out["applied"]["kind"] == "env"
    unset = out["remedy"]["args"]["env"].get("unset") or []
    for name in unset:
        assert f"{name}=" not in out["new_command"]
    assert "NCCL_P2P_LEVEL=SYS" in out["new_command"] or "NCCL_P2P_LEVEL" in unset


def test_upgrade_remedy_prints_pip_and_keeps_the_command(kimi, capsys):
    rc, check = run_json(capsys, ["check", "--json", *TARGET, "--", *story_command(kimi)])
    (finding,) = [f for f in check["findings"] if any(r["kind"] == "upgrade" for r in f["remedies"])]
    number = 1 + [r["kind"] for r in finding["remedies"]].index("upgrade")
    rc, out = run_json(capsys, ["fix", "--json", "--remedy", str(number), *TARGET, "--", *story_command(kimi)])
    spec = finding["remedies"][number - 1]["args"]["upgrade"]
    assert out["pip_command"] == f"pip install '{spec['package']}{spec['specifier']}'"
    # the new release's parser no longer has --disable-log-requests: the remedy drops it too
    assert out["new_command"] == out["old_command"].replace(" --disable-log-requests", "")
    # and the new command is checked on the release the upgrade moves to
    assert out["new_resolved"]["engine_version"] == spec["specifier"].lstrip(">=")
    assert out["new_verdict"] in ("pass", "warn")
    assert rc == 0


def test_hardware_remedy_is_refused_with_one_line(kimi, capsys):
    rc, check = run_json(capsys, ["check", "--json", *TARGET, "--", *story_command(kimi)])
    finding = next(f for f in check["findings"] if any(r["kind"] == "hardware" for r in f["remedies"]))
    number = 1 + [r["kind"] for r in finding["remedies"]].index("hardware")
    assert main(["fix", "--finding", finding["code"], "--remedy", str(number), *TARGET, "--",
                 *story_command(kimi)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be applied" in err[0]


def test_overlay_fix_refuses_a_foreign_destination(kimi, tmp_path, capsys):
    code, number = overlay_remedy_number(capsys, kimi)
    foreign = tmp_path / "taken"
    foreign.mkdir()
    (foreign / "data.bin").write_bytes(b"keep")
    argv = ["fix", "--remedy", str(number), "--dest", str(foreign), *TARGET, "--", *story_command(kimi)]
    assert main(argv) == 2
    assert "not a servepilot overlay" in capsys.readouterr().err
    assert sorted(p.name for p in foreign.iterdir()) == ["data.bin"]


def test_dry_run_builds_and_writes_nothing(kimi, tmp_path, capsys):
    code, number = overlay_remedy_number(capsys, kimi)
    script = tmp_path / "serve.sh"
    argv = ["fix", "--json", "--dry-run", "--remedy", str(number), "--write", str(script), *TARGET, "--",
            *story_command(kimi)]
    rc, out = run_json(capsys, argv)
    assert out["dry_run"] is True and out["overlay"]["built"] is False
    assert not Path(out["overlay"]["path"]).exists()
    assert not script.exists()
    assert main(argv[:1] + argv[2:]) == 0  # the same without --json shows the JSON diff
    assert '-    "kv_cache_quant_algo": "FP8",' in capsys.readouterr().out
    assert not Path(out["overlay"]["path"]).exists()


def test_a_command_without_errors_has_nothing_to_fix(tmp_path, capsys):
    model = tmp_path / "llama"
    shutil.copytree(EXAMPLE.parent / "llama-3.1-8b", model)
    target = ["--gpu", "h200x1", "--engine-version", "0.16.0"]
    command = ["vllm", "serve", str(model), "--max-model-len", "8192"]
    rc, check = run_json(capsys, ["check", "--json", *target, "--", *command])
    assert check["verdict"] in ("pass", "warn")
    assert main(["fix", *target, "--", *command]) == 0
    assert "nothing to fix" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["llama"]


def test_overlay_fix_of_a_hugging_face_cache_model_id(tmp_path, monkeypatch, capsys):
    """`vllm serve org/name` resolved through the HF cache: the snapshot's files are symlinks
    into blobs/, the overlay goes to the state dir, and the cache is not written."""
    cache = tmp_path / "hub"
    repo = cache / "models--nvidia--Kimi-K2.5-NVFP4"
    rev = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / rev
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    for f in EXAMPLE.iterdir():
        blob = repo / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        blob.write_bytes(f.read_bytes())
        os.symlink(f"../../blobs/{blob.name}", snapshot / f.name)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = tree_state(repo)
    command = ["vllm", "serve", "nvidia/Kimi-K2.5-NVFP4", "-tp", "8"]

    rc, check = run_json(capsys, ["check", "--json", *TARGET, "--", *command])
    (finding,) = [f for f in check["findings"] if any(r["kind"] == "overlay" and r["args"] for r in f["remedies"])]
    number = 1 + [r["kind"] for r in finding["remedies"]].index("overlay")
    rc, out = run_json(capsys, ["fix", "--json", "--remedy", str(number), *TARGET, "--", *command])

    overlay = Path(out["overlay"]["path"])
    assert out["overlay"]["placement"] == "state-dir"
    assert overlay.parent == Path(os.environ["SERVEPILOT_HOME"]) / "overlays"
    assert "--served-model-name nvidia/Kimi-K2.5-NVFP4" in out["new_command"]
    assert out["new_resolved"]["attention_backend"] == "TRITON_MLA"
    assert tree_state(repo) == before


def test_a_remedy_combining_overlay_and_flags_is_applied_whole(tmp_path):
    from servepilot.checkpoint.spec import ModelSpec
    from servepilot.fix import plan_fix

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"quantization_config": {"kv_cache_scheme": {"num_bits": 8}}}))
    dep = Deployment(
        launch=launch(argv=("vllm", "serve", str(ckpt), "-tp", "2"), model=str(ckpt)),
        cluster=Cluster(),
        spec=ModelSpec(path=str(ckpt), format="hf"),
    )
    combined = Remedy("overlay", "overlay + shorter context", "", {**KV_OVERLAY, "set": {"max_model_len": 4096}})
    plan = plan_fix(dep, [finding("SP-KV", "error", combined)])

    assert plan.overlay is not None and not plan.overlay.dest.exists()  # planned, not built
    assert plan.new_command.split()[:3] == ["vllm", "serve", str(plan.overlay.dest)]
    assert "--max-model-len 4096" in plan.new_command
    assert f"--served-model-name {ckpt}" in plan.new_command


def test_a_flag_remedy_with_a_placeholder_value_is_not_applied(tmp_path):
    template = Remedy("flag", "--chat-template <path>", "", {"set": {"chat_template": "<path>"}, "unset": []})
    (opt,) = remedy_options(dep_for(tmp_path), [finding("SP-TMPL", "warning", template)])
    assert not opt.applicable and "chat_template=<path>" in opt.why_not


def test_no_applicable_remedy_lists_the_options_and_exits_1(kimi, monkeypatch, capsys):
    import servepilot.checks as checks
    from servepilot.checks.result import CheckResult

    only_hardware = finding("SP-HW", "error", HARDWARE)
    monkeypatch.setattr(checks, "run_checks", lambda dep, measured=None: CheckResult("fail", (only_hardware,), {}))
    argv = ["fix", *TARGET, "--", *story_command(kimi)]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "no remedy servepilot can apply" in out and "use H200 GPUs" in out

    rc, payload = run_json(capsys, ["fix", "--json", *TARGET, "--", *story_command(kimi)])
    assert rc == 1 and payload["applied"] is None and payload["new_command"] is None
    assert [(o["finding"], o["kind"], o["applicable"]) for o in payload["options"]] == [("SP-HW", "hardware", False)]
    assert sorted(p.name for p in kimi.parent.iterdir()) == ["kimi-k2.5-nvfp4"]


def test_findings_sharing_a_code_keep_their_own_remedy_numbers(tmp_path):
    findings = [finding("SP-MEM", "error", HARDWARE), finding("SP-MEM", "error", HARDWARE, FLAG)]
    options = tuple(remedy_options(dep_for(tmp_path), findings))
    chosen = choose_remedy(options, None, None)
    assert (chosen.finding_index, chosen.number, chosen.kind) == (1, 2, "flag")


def test_hf_overrides_alternative_changes_only_the_command(kimi, capsys):
    command = [*story_command(kimi), "--max-model-len", "65536"]
    rc, check = run_json(capsys, ["check", "--json", *TARGET, "--", *command])
    found = [
        (f["code"], i)
        for f in check["findings"]
        for i, r in enumerate(f["remedies"], start=1)
        if "hf_overrides" in ((r["args"] or {}).get("set") or {})
    ]
    assert found, "check offers --hf-overrides for vLLM 0.16.0"
    code, number = found[0]
    rc, out = run_json(capsys, ["fix", "--json", "--finding", code, "--remedy", str(number), *TARGET, "--", *command])
    assert "--hf-overrides" in out["new_command"] and "kv_cache_scheme" not in out["new_command"]
    assert out["overlay"] is None
    assert out["new_resolved"]["attention_backend"] == "TRITON_MLA"
    assert out["new_verdict"] in ("pass", "warn") and rc == 0
    assert sorted(p.name for p in kimi.parent.iterdir()) == ["kimi-k2.5-nvfp4"]
