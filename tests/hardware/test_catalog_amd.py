"""AMD GPUs in the catalog, and names of other vendors' accelerators (issue 13)."""

from __future__ import annotations

import pytest

from servepilot.errors import UnknownGpu
from servepilot.hardware.catalog import cluster_from_flag, models, parse_gpu_flag

GIB = 2**30


@pytest.mark.parametrize(
    "flag, key, arch, gib, count",
    [
        ("mi300xx8", "mi300x", "gfx942", 192, 8),
        ("8xmi300x", "mi300x", "gfx942", 192, 8),
        ("mi355x", "mi355x", "gfx950", 288, 1),
        ("mi325xx8", "mi325x", "gfx942", 256, 8),
        ("mi210", "mi210", "gfx90a", 64, 1),
        ("mi100", "mi100", "gfx908", 32, 1),
        ("mi250xx8", "mi250x", "gfx90a", 64, 8),
        ("rx-7900-xtx", "rx-7900-xtx", "gfx1100", 24, 1),
        ("w7900x2", "w7900", "gfx1100", 48, 2),
        ("rx-9070-xt", "rx-9070-xt", "gfx1201", 16, 1),
    ],
)
def test_amd_gpus_by_flag(flag, key, arch, gib, count):
    model, n = parse_gpu_flag(flag)
    assert (model.key, model.gfx_arch, model.memory_bytes // GIB, n) == (key, arch, gib, count)
    assert model.vendor == "amd" and model.compute_capability is None
    cluster = cluster_from_flag(flag)
    assert cluster.platform == "rocm" and cluster.gpus[0].gfx_arch == arch


@pytest.mark.parametrize(
    "key, formats, fp4",
    [
        ("mi300x", ("float8_e4m3fnuz", "float8_e5m2fnuz"), False),
        ("mi355x", ("float8_e4m3fn", "float8_e5m2"), True),
        ("rx-9070-xt", ("float8_e4m3fn", "float8_e5m2"), False),
        ("rx-7900-xtx", (), False),
        ("mi250x", (), False),
    ],
)
def test_fp8_formats_follow_the_gfx_target(key, formats, fp4):
    model = next(m for m in models() if m.key == key)
    assert model.fp8_formats == formats and model.fp8 == bool(formats) and model.fp4 is fp4


def test_every_amd_entry_carries_its_sources():
    amd = [m for m in models() if m.vendor == "amd"]
    assert len(amd) >= 14
    for m in amd:
        assert {"gfx_arch", "memory", "bandwidth", "precision"} <= set(m.sources), m.key
        assert all(m.sources.values())


def test_nvidia_entries_keep_their_compute_capability_and_platform():
    nvidia = [m for m in models() if m.vendor == "nvidia"]
    assert nvidia and all(m.compute_capability and m.gfx_arch is None for m in nvidia)
    assert cluster_from_flag("h200x8").platform == "cuda"


@pytest.mark.parametrize(
    "flag, vendor, count, platform",
    [
        ("gaudi3x8", "intel", 8, "unknown"),
        ("ascend-910bx8", "huawei", 8, "unknown"),
        ("arc-a770", "intel", 1, "unknown"),
        ("gfx1100x2", "amd", 2, "rocm"),
        ("amd-gpu", "amd", 1, "unknown"),
    ],
)
def test_other_accelerators_give_gpus_of_unknown_memory(flag, vendor, count, platform):
    cluster = cluster_from_flag(flag)
    g = cluster.gpus[0]
    assert (g.vendor, cluster.count, cluster.platform) == (vendor, count, platform)
    assert g.memory_bytes == 0 and g.compute_capability is None and g.key is None
    assert cluster.notes and "not in servepilot's GPU catalog" in cluster.notes[0]


@pytest.mark.parametrize("flag", ["zzz", "archer", "h1OO"])
def test_a_typo_is_still_bad_input(flag):
    with pytest.raises(UnknownGpu):
        cluster_from_flag(flag)


def test_mixed_platforms_are_unknown():
    from servepilot.hardware.cluster import Cluster

    amd = cluster_from_flag("mi300x").gpus[0]
    nv = cluster_from_flag("h100").gpus[0]
    assert Cluster(gpus=(amd, nv)).platform == "unknown" and Cluster().platform is None
