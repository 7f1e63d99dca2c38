"""docs/cli.md is generated from every verb's --help and must not go stale (STYLE.md habit 14)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import click
import pytest

from servepilot.cli.main import COMMANDS, main

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gen_cli_docs", REPO / "tools" / "gen_cli_docs.py")
gen_cli_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_cli_docs)


def test_docs_cli_md_is_current():
    expected = gen_cli_docs.render()
    current = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == expected, f"docs/cli.md is stale: run `{gen_cli_docs.REGENERATE}` and commit the result"


def test_render_is_deterministic_whatever_the_terminal(monkeypatch):
    first = gen_cli_docs.render()
    monkeypatch.setenv("COLUMNS", "40")
    assert gen_cli_docs.render() == first


def test_every_verb_and_subcommand_has_a_section():
    titles = re.findall(r"^## (.+)$", gen_cli_docs.render(), flags=re.MULTILINE)
    assert titles[0] == "servepilot"
    assert {f"servepilot {verb}" for verb in COMMANDS} <= set(titles)
    assert {"servepilot overlay status", "servepilot overlay diff", "servepilot overlay remove"} <= set(titles)
    assert len(titles) == len(set(titles))


@pytest.mark.parametrize("verb", ["inspect", "stop", "overlay"])
def test_a_section_is_what_the_verb_prints(verb, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(gen_cli_docs.WIDTH))
    # click reads the terminal width once per context; pin it the way the generator does
    monkeypatch.setattr(click.Context, "__init__", _with_width(click.Context.__init__))
    assert main([verb, "--help"]) == 0
    printed = capsys.readouterr().out
    section = gen_cli_docs.render().split(f"\n## servepilot {verb}\n\n```text\n", 1)[1].split("```", 1)[0]
    assert printed == section


def _with_width(init):
    def patched(self, *args, **kwargs):
        kwargs.setdefault("terminal_width", gen_cli_docs.WIDTH)
        kwargs.setdefault("max_content_width", gen_cli_docs.WIDTH)
        init(self, *args, **kwargs)

    return patched


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n")
    monkeypatch.setattr(gen_cli_docs, "DOC", stale)
    monkeypatch.setattr(gen_cli_docs, "REPO", tmp_path)
    assert gen_cli_docs.main(["--check"]) == 1
    assert "python tools/gen_cli_docs.py" in capsys.readouterr().err
    assert gen_cli_docs.main([]) == 0 and gen_cli_docs.main(["--check"]) == 0


def test_readme_links_stay_inside_the_repository():
    # A user of the package has no ../shared folder (issue 17, item 10): every relative
    # link in README and docs/ must name a file of this repository.
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for doc in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)", doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (doc.parent / target).resolve()
            assert path.is_relative_to(root), f"{doc.name} links outside the repository: {target}"
            assert path.exists(), f"{doc.name} links to a missing file: {target}"
