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


# ---- typed rows: the schema is checked once, at load --------------------------------------

SCHEMA = {"valid_dtypes": kb.Rows(("values",)), "dtype_bytes": kb.VALUE}


def test_rows_are_typed_records_with_attribute_access():
    data = kb.typed_file({"valid_dtypes": [{"versions": ">=0.1", "source": "s@v1", "values": ["auto"]}],
                          "dtype_bytes": {"fp8": 1}}, SCHEMA, "vllm/knowledge/kv_cache.yaml")
    row = kb.row_for(data.valid_dtypes, "0.2")
    assert (row.values, row.source, row.versions) == (["auto"], "s@v1", ">=0.1")
    assert data.dtype_bytes == {"fp8": 1}
    with pytest.raises(AttributeError, match="kv_cache.yaml:valid_dtypes rows have no field 'value'"):
        row.value  # a misspelt field in code fails where it is written  # noqa: B018


def test_a_misspelt_field_in_the_data_names_the_file_and_row():
    rows = [{"versions": ">=0.1", "source": "s", "values": []}, {"versions": ">=0.2", "source": "s", "valeus": []}]
    with pytest.raises(ValueError, match=r"kv_cache.yaml:valid_dtypes\[1\]: unknown field valeus"):
        kb.typed_file({"valid_dtypes": rows}, SCHEMA, "vllm/knowledge/kv_cache.yaml")


def test_a_versioned_row_without_source_names_the_file_and_row():
    rows = [{"versions": ">=0.1", "values": []}]
    with pytest.raises(ValueError, match=r"kv_cache.yaml:valid_dtypes\[0\]: a row with versions '>=0.1' has no source"):
        kb.typed_file({"valid_dtypes": rows}, SCHEMA, "vllm/knowledge/kv_cache.yaml")


def test_an_unknown_section_is_refused():
    with pytest.raises(ValueError, match="unknown section 'valid_dtype'"):
        kb.typed_file({"valid_dtype": []}, SCHEMA, "vllm/knowledge/kv_cache.yaml")


def test_compiled_cache_is_used_and_survives_damage(tmp_path, monkeypatch):
    from servepilot import datafile

    monkeypatch.setenv("SERVEPILOT_CACHE", str(tmp_path))
    first = datafile.load_yaml_resource("servepilot.engines.vllm.knowledge", "engine.yaml")
    cached = list((tmp_path / "data").glob("servepilot.engines.vllm.knowledge.engine.yaml.*.marshal"))
    assert len(cached) == 1
    cached[0].write_bytes(b"not marshal data")
    assert datafile.load_yaml_resource("servepilot.engines.vllm.knowledge", "engine.yaml") == first
    import marshal

    cached[0].write_bytes(marshal.dumps(("another key", {"oldest_known": "wrong"})))
    assert datafile.load_yaml_resource("servepilot.engines.vllm.knowledge", "engine.yaml") == first


def test_unwritable_cache_still_loads(tmp_path, monkeypatch):
    from servepilot import datafile

    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where the cache directory would go
    monkeypatch.setenv("SERVEPILOT_CACHE", str(blocker))
    assert datafile.load_yaml_resource("servepilot.engines.vllm.knowledge", "engine.yaml")["oldest_known"]
