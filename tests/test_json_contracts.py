"""Result objects give their own JSON (`to_json()`); the CLI only adds the "schema" key.

Each verb's --json output must be exactly {"schema": obj.JSON_SCHEMA, **obj.to_json()}, and
every top-level key docs/json/<verb>.md documents must be there (keys are only ever added).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from servepilot.checks import run_checks
from servepilot.cli.main import main
from servepilot.deployment import build_deployment
from servepilot.fix import plan_fix
from servepilot.planning import plan_deployment

REPO = Path(__file__).resolve().parents[1]
KIMI = ["vllm", "serve", str(REPO / "examples" / "kimi-k2.5-nvfp4"), "-tp", "8", "--trust-remote-code"]
SGLANG = ["python", "-m", "sglang.launch_server", "--model-path", str(REPO / "examples" / "llama-3.1-8b"), "--tp", "4"]
FLAGS = {"vllm": ["--gpu", "rtx-pro-6000x8", "--engine-version", "0.16.0"],
         "sglang": ["--gpu", "h100x8", "--engine-version", "0.5.6"]}


def documented_keys(doc: str) -> set[str]:
    """The keys of the first key table of docs/json/<doc>.md (the top-level object)."""
    text = (REPO / "docs" / "json" / f"{doc}.md").read_text(encoding="utf-8")
    table = re.search(r"(?ms)^\| *key *\|.*?(?=^\s*$)|^\| *`schema`.*?(?=^\s*$)", text)
    assert table, f"docs/json/{doc}.md has no key table"
    keys = set(re.findall(r"^\| *`(\w+)`", table.group(0), flags=re.M))
    assert keys, f"docs/json/{doc}.md: no keys read"
    return keys


def cli_json(capsys, argv) -> dict:
    main(argv)
    return json.loads(capsys.readouterr().out)


def _dep(cmd, engine):
    return build_deployment(cmd, gpu=FLAGS[engine][1], engine_version=FLAGS[engine][3])


@pytest.mark.parametrize("cmd,engine", [(KIMI, "vllm"), (SGLANG, "sglang")])
def test_check_plan_and_deployment_json_come_from_the_objects(capsys, cmd, engine):
    dep = _dep(cmd, engine)
    cases = [("check", run_checks(dep)), ("plan", plan_deployment(dep)), ("deployment", dep)]
    for verb, obj in cases:
        out = cli_json(capsys, [verb, "--json", *FLAGS[engine], "--", *cmd])
        assert out == {"schema": obj.JSON_SCHEMA, **obj.to_json()}
        assert list(out)[0] == "schema"
        assert documented_keys(verb) <= set(out), f"{verb}: documented keys missing"


def test_fix_json_comes_from_the_plan(capsys):
    cmd = [*KIMI, "--kv-cache-dtype", "auto"]
    dep = _dep(cmd, "vllm")
    checked = run_checks(dep)
    plan = plan_fix(dep, checked.findings, engine_version="0.16.0", gpu="rtx-pro-6000x8")
    out = cli_json(capsys, ["fix", "--json", "--dry-run", *FLAGS["vllm"], "--", *cmd])
    assert out == {"schema": plan.JSON_SCHEMA, **plan.to_json(None, dry_run=True)}
    assert documented_keys("fix") <= set(out)
