"""`fix`: which remedy is chosen, and what applying it does to the command and the checkpoint."""

from __future__ import annotations

import pytest

from servepilot.checks.finding import Finding, Remedy
from servepilot.deployment import Deployment
from servepilot.engines.launch import EngineLaunch, ShellContext
from servepilot.errors import BadInput
from servepilot.fix import _choose, _options, served_model_name
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
UPGRADE = Remedy("upgrade", "pip install 'vllm>=0.18.0'", "new engine", {"upgrade": {"package": "vllm", "specifier": ">=0.18.0"}})


def test_default_is_top_applicable_remedy_of_first_error_with_one(tmp_path):
    findings = [
        finding("SP-W", "warning", FLAG),
        finding("SP-HW", "error", HARDWARE),  # nothing servepilot can do: skipped
        finding("SP-KV", "error", HARDWARE, OVERLAY, FLAG),
    ]
    chosen = _choose(tuple(_options(dep_for(tmp_path), findings)), None, None)
    assert (chosen.finding, chosen.number, chosen.kind) == ("SP-KV", 2, "overlay")


def test_remedy_number_indexes_the_chosen_findings_list(tmp_path):
    findings = [finding("SP-KV", "error", OVERLAY, FLAG, UPGRADE)]
    options = tuple(_options(dep_for(tmp_path), findings))
    assert _choose(options, 3, None).kind == "upgrade"
    assert _choose(options, 2, None).kind == "flag"
    with pytest.raises(BadInput, match="has 3 remedies"):
        _choose(options, 4, None)
    with pytest.raises(BadInput, match="numbered from 1"):
        _choose(options, 0, None)


def test_a_hardware_remedy_cannot_be_chosen_by_number(tmp_path):
    options = tuple(_options(dep_for(tmp_path), [finding("SP-KV", "error", HARDWARE, FLAG)]))
    with pytest.raises(BadInput, match="cannot be applied"):
        _choose(options, 1, None)


def test_finding_code_selects_warnings_too_and_unknown_codes_are_named(tmp_path):
    options = tuple(_options(dep_for(tmp_path), [finding("SP-W", "warning", FLAG), finding("SP-E", "error", HARDWARE)]))
    assert _choose(options, None, None) is None  # the only error has no applicable remedy
    assert _choose(options, None, "SP-W").finding == "SP-W"
    with pytest.raises(BadInput, match="SP-E, SP-W"):
        _choose(options, None, "SP-NOPE")


def test_overlay_is_not_applicable_for_a_remote_or_unreadable_checkpoint(tmp_path):
    remote = dep_for(tmp_path, shell=ShellContext(ssh_host="root@gpu-box"))
    (opt,) = _options(remote, [finding("SP-KV", "error", OVERLAY)])
    assert not opt.applicable and "gpu-box" in opt.why_not
    unreadable = Deployment(launch=launch(), cluster=Cluster(), spec=None)
    (opt,) = _options(unreadable, [finding("SP-KV", "error", OVERLAY)])
    assert not opt.applicable and "not readable" in opt.why_not


def test_served_model_name_keeps_what_clients_use():
    assert served_model_name(launch(model="moonshotai/Kimi-K2.5")) == "moonshotai/Kimi-K2.5"
    assert served_model_name(launch(options={"served_model_name": ["kimi"]})) == "kimi"
    assert served_model_name(launch(engine="llama.cpp", model="m.gguf", options={"alias": "tiny"})) == "tiny"
