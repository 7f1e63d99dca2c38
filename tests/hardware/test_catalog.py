"""The GPU catalog: coverage, sources, --gpu parsing and NVML name matching."""

import pytest

from servepilot.errors import UnknownGpu
from servepilot.hardware.catalog import cluster_from_flag, match_nvml_name, models, parse_gpu_flag

MIB = 1024 * 1024

REQUIRED = [
    "b300", "b200", "gb200", "h200-sxm", "h200-nvl", "h100-sxm", "h100-pcie", "h100-nvl", "h20",
    "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-40gb", "a100-pcie-80gb", "a10g", "l40s", "l4", "t4",
    "v100-sxm2-32gb", "rtx-pro-6000-blackwell-workstation", "rtx-pro-6000-blackwell-server",
    "rtx-pro-6000-blackwell-max-q", "rtx-5090", "rtx-5080", "rtx-4090", "rtx-4060", "rtx-3090", "rtx-6000-ada",
]


def test_required_gpus_present_with_sources():
    keys = {m.key for m in models()}
    assert set(REQUIRED) <= keys
    for m in models():
        arch = "compute_capability" if m.vendor == "nvidia" else "gfx_arch"  # AMD: the LLVM target
        for fact in (arch, "memory", "bandwidth", "link", "precision"):
            assert m.sources.get(fact), (m.key, fact)
        assert m.memory_basis in ("nvidia-smi", "nominal")


def test_known_nvidia_smi_totals():
    by = {m.key: m for m in models()}
    assert by["h100-sxm"].memory_bytes == 81559 * MIB
    assert by["rtx-pro-6000-blackwell-workstation"].memory_bytes == 97887 * MIB
    assert by["h200-sxm"].compute_capability == (9, 0)
    assert by["b300"].compute_capability == (10, 3)
    assert by["rtx-pro-6000-blackwell-server"].compute_capability == (12, 0)
    assert not by["a100-sxm-80gb"].fp8 and by["l40s"].fp8 and not by["l40s"].fp4


@pytest.mark.parametrize(
    "flag,key,count",
    [("rtx-pro-6000x8", "rtx-pro-6000-blackwell-workstation", 8), ("h200x8", "h200-sxm", 8),
     ("a100-40gbx2", "a100-sxm-40gb", 2), ("h100-sxmx4", "h100-sxm", 4), ("t4", "t4", 1),
     ("8xH100", "h100-sxm", 8), ("RTX_PRO_6000_Server*2", "rtx-pro-6000-blackwell-server", 2),
     ("NVIDIA H100 80GB HBM3", "h100-sxm", 1), ("h100-nvl", "h100-nvl", 1)],
)
def test_gpu_flag(flag, key, count):
    model, n = parse_gpu_flag(flag)
    assert (model.key, n) == (key, count)


def test_cluster_from_flag():
    c = cluster_from_flag("rtx-pro-6000x8")
    assert c.source == "flag" and c.count == 8 and c.topology == "pcie"
    assert [g.index for g in c.gpus] == list(range(8))
    assert cluster_from_flag("h200x8").topology == "nvlink"
    assert any("nominal" in n for n in cluster_from_flag("a100x2").notes)


def test_mixed_gpus_are_joined_with_plus_in_cuda_order():
    c = cluster_from_flag("a100-80gbx2+a100-40gb")
    assert [g.key for g in c.gpus] == ["a100-sxm-80gb", "a100-sxm-80gb", "a100-sxm-40gb"]
    assert [g.index for g in c.gpus] == [0, 1, 2]
    assert c.gpus[0].memory_bytes > c.gpus[2].memory_bytes
    with pytest.raises(UnknownGpu):
        cluster_from_flag("a100-80gb+")
    with pytest.raises(UnknownGpu):
        cluster_from_flag("a100-80gb+h1OO")


@pytest.mark.parametrize("flag,near", [("h1OO", "h100"), ("rtx-pro-600x8", "rtx-pro-6000"), ("l40ss", "l40s")])
def test_unknown_gpu_suggests_nearest(flag, near):
    with pytest.raises(UnknownGpu) as exc:
        parse_gpu_flag(flag)
    assert near in exc.value.one_line()
    assert "\n" not in exc.value.one_line()


@pytest.mark.parametrize(
    "name,key",
    [("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000-blackwell-workstation"),
     ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-blackwell-server"),
     ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("Tesla T4", "t4"), ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
     ("NVIDIA A100 80GB PCIe",
      "a100-pcie-80gb"), ("NVIDIA B300 SXM6 AC", "b300"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
     ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"), ("NVIDIA H200", "h200-sxm")],
)
def test_nvml_names(name, key):
    assert match_nvml_name(name).key == key


def test_nvml_name_unknown():
    assert match_nvml_name("NVIDIA GeForce GT 710") is None


def test_unknown_gpu_suggests_each_card_once():
    # "rtxpro6000" and "rtx-pro-6000" are aliases of one card: naming both wastes a suggestion
    from servepilot.hardware.catalog import all_aliases

    with pytest.raises(UnknownGpu) as exc:
        parse_gpu_flag("rtx6000")
    suggested = exc.value.hint.removeprefix("did you mean ").rstrip("?").split(", ")
    keys = [all_aliases()[s].key for s in suggested]
    assert len(keys) == len(set(keys)) >= 2


def test_unknown_gpu_with_nothing_near_lists_the_catalog():
    with pytest.raises(UnknownGpu) as exc:
        parse_gpu_flag("zzz")
    assert "h100-sxm" in exc.value.hint and "rtx-4090" in exc.value.hint


@pytest.mark.parametrize(
    "name,key,cc",
    [("NVIDIA RTX A6000", "rtx-a6000", (8, 6)), ("NVIDIA A800-SXM4-80GB", "a800-sxm-80gb", (8, 0)),
     ("Tesla P100-PCIE-16GB", "tesla-p100-pcie-16gb", (6, 0)), ("Tesla P40", "tesla-p40", (6, 1)),
     ("NVIDIA GeForce GTX 1080 Ti", "gtx-1080-ti", (6, 1)),
     ("NVIDIA GeForce RTX 2080 Ti", "rtx-2080-ti", (7, 5)), ("NVIDIA GeForce RTX 2080", "rtx-2080", (7, 5)),
     ("Quadro RTX 4000", "quadro-rtx-4000", (7, 5)), ("NVIDIA GeForce 940MX", "geforce-940mx", (5, 0)),
     ("NVIDIA L40", "l40", (8, 9)), ("NVIDIA L40S", "l40s", (8, 9)), ("NVIDIA A40", "a40", (8, 6)),
     ("NVIDIA GH200 480GB", "gh200",
      (9, 0)), ("NVIDIA GB10", "gb10", (12, 1)), ("NVIDIA GeForce RTX 5070", "rtx-5070", (12, 0))],
)
def test_older_and_workstation_gpus(name, key, cc):
    """NVML names of GPUs launch reports name resolve to their own entry and capability."""
    model = match_nvml_name(name)
    assert (model.key, model.compute_capability) == (key, cc)


def test_precision_follows_the_capability_rule():
    by = {m.key: m for m in models()}
    assert by["gb10"].fp4 and by["gb10"].fp8 and by["l40"].fp8 and not by["rtx-a6000"].fp8
    assert by["quadro-rtx-4000"].memory_basis == "nominal" and by["quadro-rtx-4000"].memory_bytes == 8 * 1024 * MIB


@pytest.mark.parametrize(
    "name,key,cc,gib",
    [("NVIDIA GeForce RTX 2060", "rtx-2060", (7, 5), 6),
     ("Quadro RTX 6000", "quadro-rtx-6000", (7, 5), 24),
     ("NVIDIA GeForce RTX 4080 SUPER", "rtx-4080-super", (8, 9), 16),
     ("NVIDIA GeForce RTX 4070 Ti SUPER", "rtx-4070-ti-super", (8, 9), 16),
     ("NVIDIA GeForce RTX 4070 Ti", "rtx-4070-ti", (8, 9), 12),
     ("NVIDIA GeForce RTX 4070", "rtx-4070", (8, 9), 12),
     ("NVIDIA RTX 5000 Ada Generation", "rtx-5000-ada", (8, 9), 32),
     ("Tesla V100S-PCIE-32GB", "v100s-pcie-32gb", (7, 0), 32),
     ("NVIDIA GeForce GTX 1080", "gtx-1080", (6, 1), 8),
     ("NVIDIA GeForce GTX 1080 Ti", "gtx-1080-ti", (6, 1), 11),
     ("NVIDIA H800", "h800-sxm", (9, 0), 80), ("NVIDIA H800 PCIe", "h800-pcie", (9, 0), 80),
     ("NVIDIA GeForce RTX 4090 D", "rtx-4090d", (8, 9), 24),
     ("NVIDIA GeForce RTX 3050", "rtx-3050", (8, 6), 8)],
)
def test_consumer_and_workstation_variants_resolve_to_their_own_entry(name, key, cc, gib):
    """A Ti / SUPER / Ada variant is its own card (other memory), not the base name's entry."""
    model = match_nvml_name(name)
    gib_found = model.memory_bytes // (1024 * MIB)
    assert (model.key, model.compute_capability, gib_found) == (key, cc, gib)


def test_a_name_shared_by_two_memory_sizes_is_told_apart_by_memory():
    """NVML calls both RTX 4060 Ti cards the same; the probed memory picks the entry."""
    assert match_nvml_name("NVIDIA GeForce RTX 4060 Ti", 8 * 1024 * MIB).key == "rtx-4060-ti-8gb"
    assert match_nvml_name("NVIDIA GeForce RTX 4060 Ti", 16 * 1024 * MIB).key == "rtx-4060-ti"
    assert match_nvml_name("NVIDIA H20", 143073 * MIB).key == "h20-141gb"
    assert match_nvml_name("NVIDIA H20", 97871 * MIB).key == "h20"
