"""The vLLM fact files cover 0.19-0.33 with rows read from those releases, not their neighbours."""

from __future__ import annotations

import re

import pytest
from packaging.version import Version

from servepilot.engines import knowledge as kb
from servepilot.planning.facts import fact

MIDDLE = [f"0.{minor}.0" for minor in range(19, 34)]


def test_every_release_between_018_and_034_is_a_read_release():
    read = kb.load_file("vllm", "engine")["read_releases"]
    assert [v for v in MIDDLE if v not in read] == []


@pytest.mark.parametrize("version", MIDDLE)
def test_each_middle_release_has_one_row_per_versioned_fact(version):
    attention = kb.load_file("vllm", "attention")
    kv = kb.load_file("vllm", "kv_cache")
    for rows in (attention["priorities"], attention["selection"], attention["block_size"],
                 kv["valid_dtypes"], kv["modelopt_auto"], kv["compressed_tensors_forces_fp8"]):
        assert len(kb.rows_for(rows, version)) == 1


@pytest.mark.parametrize("version", MIDDLE)
def test_each_middle_release_cites_a_source_read_in_the_range(version):
    # a row filled from neighbours would cite v0.18.0 or v0.34.0 only
    attention = kb.load_file("vllm", "attention")
    source = kb.row_for(attention["priorities"], version).source
    cited = [Version(re.match(r"[0-9.]*[0-9]", part).group()) for part in source.split("@v")[1:]]
    assert any(Version("0.19.0") <= v < Version("0.34.0") for v in cited), source


@pytest.mark.parametrize("version,major_12",
                         [("0.23.0", None), ("0.24.0", ["TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120"])])
def test_sm12x_mla_branch_starts_in_024(version, major_12):
    row = kb.row_for(kb.load_file("vllm", "attention")["priorities"], version)
    assert row["mla"]["major_12"] == major_12


@pytest.mark.parametrize("version,value", [("0.19.0", 0.9), ("0.20.0", 0.92), ("0.33.0", 0.92), ("0.34.0", 1.0)])
def test_planner_gpu_memory_utilization_default(version, value):
    assert fact("vllm", "gpu_memory_utilization", version).value == value
