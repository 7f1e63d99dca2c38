"""The NVML probe against a scripted fake of pynvml: several GPUs, a failing GPU, an old driver."""

import socket

import pytest

from servepilot.hardware import nvml as nvml_module
from servepilot.hardware import probe
from servepilot.hardware.probe import NO_GPU_NOTE, port_free, probe_cluster, shm_bytes

MIB = 1024 * 1024


def test_eight_rtx_pro_6000_on_pcie(monkeypatch, nvml):
    fake = nvml.install(monkeypatch, nvml.FakeNvml(nvml.rtx_pro_6000_box(8)))
    cluster = probe_cluster()
    assert cluster.source == "probe" and cluster.count == 8
    g = cluster.gpus[0]
    assert g.key == "rtx-pro-6000-blackwell-workstation"
    assert g.compute_capability == (12, 0) and g.cc_int == 120
    assert g.memory_bytes == 97887 * MIB
    assert (g.fp8, g.fp4, g.nvlink) == (True, True, False)
    assert cluster.topology == "pcie"
    assert cluster.driver_version == "570.124.06" and cluster.cuda_driver_version == "12.8"
    assert fake.shutdowns == 1 and not fake.initialized


def test_nvlink_machine(monkeypatch, nvml):
    nvml.install(monkeypatch, nvml.FakeNvml(nvml.h100_nvlink_box(4)))
    cluster = probe_cluster()
    assert cluster.topology == "nvlink"
    assert all(g.nvlink and g.key == "h100-sxm" for g in cluster.gpus)


def test_failing_gpu_is_shown_not_dropped(monkeypatch, nvml):
    gpus = nvml.h100_nvlink_box(3)
    gpus[1].lost = True
    nvml.install(monkeypatch, nvml.FakeNvml(gpus))
    cluster = probe_cluster()
    assert cluster.count == 3
    lost = cluster.gpus[1]
    assert lost.index == 1 and lost.error == "GPU is lost"
    assert lost.memory_bytes == 0 and lost.compute_capability is None
    assert cluster.gpus[0].error is None and cluster.gpus[2].error is None


def test_old_driver_and_bytes_names(monkeypatch, nvml):
    gpus = [nvml.FakeGpu("Tesla T4", 15360, (7, 5), bytes_name=True)]
    nvml.install(monkeypatch, nvml.FakeNvml(gpus, driver="470.82.01", cuda=11040))
    cluster = probe_cluster()
    assert cluster.driver_version == "470.82.01"
    assert cluster.cuda_driver_version == "11.4"
    assert cluster.gpus[0].name == "Tesla T4" and cluster.gpus[0].key == "t4"
    assert cluster.topology is None  # one GPU


def test_gpu_missing_from_catalog_keeps_nvml_facts(monkeypatch, nvml):
    # (the GTX 1080 this test used joined the catalog; a GTX 970 has not)
    nvml.install(monkeypatch, nvml.FakeNvml([nvml.FakeGpu("NVIDIA GeForce GTX 970", 4096, (5, 2))]))
    g = probe_cluster().gpus[0]
    assert g.key is None and g.compute_capability == (5, 2)
    assert (g.fp8, g.fp4) == (False, False)  # by compute capability
    assert g.bandwidth_gbps is None


def test_no_library_no_gpu(monkeypatch, nvml):
    nvml.install(monkeypatch, nvml.FakeNvml([], library_missing=True))
    cluster = probe_cluster()
    assert cluster.source == "none" and cluster.count == 0
    assert any("NVML Shared Library Not Found" in n for n in cluster.notes)
    assert NO_GPU_NOTE in cluster.notes


def test_pynvml_not_installed(monkeypatch):
    def missing():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml_module, "load_nvml", missing)
    cluster = probe_cluster()
    assert cluster.source == "none"
    assert any("nvidia-ml-py is not installed" in n for n in cluster.notes)


@pytest.mark.parametrize(
    "visible,indices",
    [("1,3", [1, 3]), ("3,1", [3, 1]), ("GPU-02", [2]), ("0,9,1", [0]), ("", []), ("-1", [])],
)
def test_cuda_visible_devices(monkeypatch, nvml, visible, indices):
    nvml.install(monkeypatch, nvml.FakeNvml(nvml.h100_nvlink_box(4)))
    cluster = probe_cluster(cuda_visible_devices=visible)
    assert [g.index for g in cluster.gpus] == indices
    assert any(f"CUDA_VISIBLE_DEVICES={visible}" in n for n in cluster.notes)


def test_port_in_use_and_free():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert port_free("127.0.0.1", port) == (False, None)
    assert port_free("127.0.0.1", port)[0] is True


def test_probe_records_port(monkeypatch, nvml):
    nvml.install(monkeypatch, nvml.FakeNvml(nvml.h100_nvlink_box(1)))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        cluster = probe_cluster(port=port, host="127.0.0.1")
    assert cluster.extra == {"port": port, "port_host": "127.0.0.1", "port_free": False}


def test_shm_size(tmp_path):
    assert shm_bytes(str(tmp_path)) > 0
    assert shm_bytes(str(tmp_path / "missing")) is None


def test_torch_arch_list_absent(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert probe.torch_arch_list() is None


def test_fake_has_the_real_pynvml_names():
    """The fake must not drift from nvidia-ml-py: every function the probe calls exists there."""
    real = nvml_module.load_nvml()
    for name in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetName",
                 "nvmlDeviceGetUUID", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetCudaComputeCapability",
                 "nvmlDeviceGetNvLinkState", "nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion",
                 "NVMLError", "NVML_FEATURE_ENABLED"):
        assert hasattr(real, name), name
    assert real.NVML_FEATURE_ENABLED == 1
