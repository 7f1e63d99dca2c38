"""The flag tables are data with sources, and they hold the facts read from the engines' code."""

import re

import pytest
from packaging.specifiers import SpecifierSet

from servepilot.engines.flagtable import human_int, load_table

TABLES = [("vllm", "flags"), ("sglang", "flags"), ("llamacpp", "flags"), ("llamacpp", "python_server_flags")]


@pytest.mark.parametrize("package,key", TABLES)
def test_every_row_has_a_source_and_a_valid_range(package, key):
    table = load_table(package, key)
    assert len(table.rows) > 50
    for row in table.rows:
        assert row.source and "@" in row.source, row
        SpecifierSet(row.versions)  # raises on a malformed range
        assert row.name.startswith("-") and re.fullmatch(r"[a-z0-9_.]+", row.dest), row


def _spec(version, name):
    return load_table("vllm").for_version(version).lookup(name)[0]


@pytest.mark.parametrize("version", ["0.8.5", "0.10.1.1", "0.13.0", "0.16.0", "0.34.0"])
def test_vllm_short_forms_in_every_sampled_version(version):
    # vllm/engine/arg_utils.py: add_argument("--tensor-parallel-size", "-tp", ...), "-pp", "-dp"
    for short, dest in (("-tp",
                         "tensor_parallel_size"), ("-pp", "pipeline_parallel_size"), ("-dp", "data_parallel_size")):
        assert _spec(version, short).dest == dest


def test_vllm_kv_cache_memory_bytes_arrived_in_0_10_2():
    assert _spec("0.10.1.1", "--kv-cache-memory-bytes") is None
    assert _spec("0.10.2", "--kv-cache-memory-bytes").kind == "human_int"
    assert _spec("0.16.0", "--kv-cache-memory-bytes") is not None


def test_vllm_attention_backend_flag_from_0_13():
    assert _spec("0.11.0", "--attention-backend") is None
    assert _spec("0.13.0", "--attention-backend").dest == "attention_backend"
    assert _spec("0.16.0", "-ac").dest == "attention_config"


def test_vllm_disable_log_requests_gone_in_0_18():
    assert _spec("0.16.0", "--disable-log-requests") is not None
    assert _spec("0.18.0", "--disable-log-requests") is None


def test_vllm_nightly_counts_as_its_release():
    assert _spec("0.16.0rc2.dev313", "--attention-backend") is not None


def test_vllm_defaults_from_source():
    defaults = load_table("vllm").for_version("0.16.0").default_values()
    assert defaults["gpu_memory_utilization"] == 0.9
    assert defaults["port"] == 8000
    assert defaults["kv_cache_dtype"] == "auto"


def test_vllm_booleans_have_no_forms():
    vt = load_table("vllm").for_version("0.16.0")
    spec, negated = vt.lookup("--no-enforce-eager")
    assert spec.dest == "enforce_eager" and negated
    assert vt.lookup("--no-port") == (None, False)


def test_llamacpp_names_match_common_arg():
    vt = load_table("llamacpp").for_version(None, program="llama-server")
    assert vt.lookup("-ngl")[0].dest == "n_gpu_layers"
    assert vt.lookup("-ctk")[0].dest == "cache_type_k"
    assert vt.lookup("-c")[0].dest == "ctx_size"
    assert vt.lookup("--no-jinja")[1] is True  # common_arg's negative names
    assert vt.lookup("--jinja")[0].dest == vt.lookup("--no-jinja")[0].dest == "jinja"
    assert vt.default_values()["port"] == 8080


@pytest.mark.parametrize(
    "text,value,problem",
    [("1k", 1000, False), ("1K", 1024, False), ("25.6k", 25600, False), ("20G", 20 * 2**30, False),
     ("20g", 20 * 10**9, False), ("20GiB", 20 * 2**30, True), ("4096", 4096, False)],
)
def test_human_int_follows_vllm(text, value, problem):
    got, why = human_int(text)
    assert got == value
    assert (why is not None) == problem
