"""The versioned-facts loader: version matching, and every fact file well-formed with sources."""

from __future__ import annotations

from importlib import resources

import pytest

from servepilot.engines import knowledge as kb
from servepilot.errors import BadInput


@pytest.mark.parametrize("version,spec,expected", [
    ("0.16.0", ">=0.16.0,<0.18.0", True),
    ("0.18.0", ">=0.16.0,<0.18.0", False),
    ("0.16.0rc2", ">=0.16.0,<0.18.0", True),  # a release candidate behaves as its release
    ("v0.17.1", ">=0.16.0,<0.18.0", True),
    ("0.10.1.dev101+gbda9d0535", ">=0.10.1", True),
    ("0.15.1", ">=0.15.0", True),
])
def test_version_in(version, spec, expected):
    assert kb.version_in(version, spec) is expected


def test_bad_version_is_bad_input():
    with pytest.raises(BadInput, match="not a version"):
        kb.parse_version("sixteen")


def test_row_for_takes_the_first_matching_row():
    rows = [{"versions": ">=0.18.0", "source": "a", "x": 1}, {"versions": ">=0.10.0", "source": "b", "x": 2}]
    assert kb.row_for(rows, "0.18.0")["x"] == 1
    assert kb.row_for(rows, "0.12.0")["x"] == 2
    assert kb.row_for(rows, "0.9.0") is None


def _fact_files():
    for engine in ("vllm", "sglang", "llamacpp"):
        folder = resources.files(f"servepilot.engines.{engine}.knowledge")
        for entry in folder.iterdir():
            if entry.name.endswith(".yaml"):
                yield engine, entry.name[:-5]


@pytest.mark.parametrize("engine,name", sorted(_fact_files()))
def test_every_fact_file_loads_and_every_versioned_row_has_a_source(engine, name):
    data = kb.load_file(engine, name)  # validates specifiers and sources
    assert data


def test_a_row_without_source_is_refused(tmp_path):
    with pytest.raises(ValueError, match="has no source"):
        kb._validate({"rows": [{"versions": ">=0.1"}]}, "x.yaml")


def test_known_range():
    assert kb.is_known_version("vllm", "0.16.0")
    assert not kb.is_known_version("vllm", "0.9.2")
    assert not kb.is_known_version("vllm", "1.2.0")


def test_flagtable_and_knowledge_share_one_version_reader():
    # the check engineer imports engines.knowledge, the command-line parser engines.flagtable:
    # both names must stay, and must be the same implementation
    from servepilot.engines import flagtable

    assert flagtable.version_in is kb.version_in
    assert flagtable.release_version is kb.release_version
    assert kb.release_version("v0.16.0rc2.dev313") == kb.release_version("0.16.0")
    assert kb.release_of("0.10.1.dev101+gbda9d0535") == "0.10.1"
    assert kb.version_in("0.16.0rc1", "") and kb.version_in("0.16.0rc1", ">=0.16.0")
