"""The rule table: discovered from the rules package, codes unique, every rule documented."""

from __future__ import annotations

from checkfixtures import deployment, llama_like

from servepilot.categories import CATEGORIES
from servepilot.checks import registry, run_checks
from servepilot.checks.finding import Finding


def test_rules_are_discovered_from_the_package():
    rules = registry.load_rules()
    modules = {r.module for r in rules}
    assert {"servepilot.checks.rules.attention", "servepilot.checks.rules.parallelism",
            "servepilot.checks.rules.host"} <= modules
    codes = [r.code for r in rules]
    assert len(codes) == len(set(codes))


def test_every_rule_has_facts_sources_and_a_contract_category():
    for r in registry.load_rules():
        assert r.category in CATEGORIES
        assert r.title
        if r.module.startswith("servepilot.checks.rules.") and not r.module.endswith(".memory"):
            assert r.facts and r.sources, r.code


def test_a_registered_rule_runs_and_is_ranked(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "RULES", list(registry.load_rules()))

    @registry.rule("SP-TEST-001", "other", "test rule", facts=("x",), sources=("y",))
    def always(dep, ctx):
        return [Finding("SP-TEST-001", "other", "error", "always", "a test finding")]

    result = run_checks(deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=1))
    assert result.verdict == "fail" and result.findings[0].code == "SP-TEST-001"


def test_engine_specific_rules_skip_other_engines(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "RULES", list(registry.load_rules()))
    seen = []

    @registry.rule("SP-TEST-002", "other", "vllm only", engines=("vllm",))
    def only_vllm(dep, ctx):
        seen.append(dep.engine)
        return []

    run_checks(deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=1, engine="sglang", version="0.5.2"))
    assert seen == []
    run_checks(deployment(llama_like(tmp_path / "n"), cc=(9, 0), n=1))
    assert seen == ["vllm"]
