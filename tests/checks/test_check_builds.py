"""SP-CUDA-003: the engine's prebuilt kernels against the GPU, from the version alone (no probe)."""

from __future__ import annotations

import dataclasses

import pytest
from checkfixtures import GIB, codes, deployment, finding, llama_like

from servepilot.checks import run_checks
from servepilot.checks.rules.host import runs_on


@pytest.mark.parametrize("cc, archs, expected", [
    ((8, 6), ("8.0", "9.0"), True),  # sm_80 SASS runs on 8.6
    ((7, 5), ("8.0", "8.9"), False),  # nothing of major 7
    ((12, 0), ("7.0", "9.0"), False),
    ((10, 3), ("10.0",), True),
    ((5, 0), ("5.2", "6.1"), False),  # a lower minor never runs a higher one
])
def test_same_major_lower_minor_rule(cc, archs, expected):
    assert runs_on(cc, archs) is expected


def test_blackwell_before_cuda_128_wheels_is_an_error_with_upgrade(tmp_path):
    path = llama_like(tmp_path / "m")
    f = finding(run_checks(deployment(path, cc=(12, 0), n=1, version="0.8.4", memory=32 * GIB)), "SP-CUDA-003")
    assert f.severity == "error" and f.category == "cuda_driver_arch"
    assert "no kernel image" in f.detail
    # 0.9.x lists sm_120 but its prebuilt wheel and image were reported without it: past that range
    assert f.remedies[0].args == {"upgrade": {"package": "vllm", "specifier": ">=0.10.0"}}


@pytest.mark.parametrize("version, cc, expected", [("0.9.0", (12, 0), "warning"), ("0.9.2", (12, 0), "warning"),
                                                   ("0.9.1", (10, 0), None), ("0.10.0", (12, 0), None)])
def test_blackwell_on_cuda_128_wheels_and_the_reported_sm120_gap(tmp_path, version, cc, expected):
    path = llama_like(tmp_path / "m")
    found = [f for f in run_checks(deployment(path, cc=cc, n=1, version=version,
                                              memory=32 * GIB)).findings if f.code == "SP-CUDA-003"]
    assert (found[0].severity if found else None) == expected
    if found:
        assert "issues/20748" in " ".join(e.source for e in found[0].evidence)


def test_pascal_has_no_vllm_kernels_in_any_release(tmp_path):
    path = llama_like(tmp_path / "m", dtype="float16")
    for version in ("0.7.3", "0.18.0"):
        f = finding(run_checks(deployment(path, cc=(6, 0), n=1, version=version, memory=16 * GIB)), "SP-CUDA-003")
        assert not any(r.kind == "upgrade" for r in f.remedies)


def test_a_probed_torch_arch_list_leaves_the_verdict_to_sp_cuda_001(tmp_path):
    path = llama_like(tmp_path / "m")
    result = run_checks(deployment(path, cc=(12,
                                             0), n=1, version="0.8.4", memory=32 * GIB, arch_list=("sm_80", "sm_90")))
    assert "SP-CUDA-003" not in codes(result) and "SP-CUDA-001" in codes(result)


@pytest.mark.parametrize("cc, fails", [((7, 5), True), ((8, 6), False)])
def test_sgl_kernel_starts_at_sm80(tmp_path, cc, fails):
    path = llama_like(tmp_path / "m")
    dep = deployment(path, cc=cc, n=1, version="0.5.2", engine="sglang", memory=24 * GIB)
    dep = dataclasses.replace(dep,
                              launch=dataclasses.replace(dep.launch, argv=("python3", "-m",
                                                                           "sglang.launch_server"),
                                                         program="python -m sglang.launch_server"))
    assert ("SP-CUDA-003" in codes(run_checks(dep))) is fails


@pytest.mark.parametrize("program, fails", [("./llama.cpp/build/bin/main", True), ("llama-server", False)])
def test_llamacpp_main_era_builds_start_at_sm52(tmp_path, program, fails):
    path = llama_like(tmp_path / "m")
    dep = deployment(path, cc=(5, 0), n=1, version=None, engine="llama.cpp", memory=2 * GIB)
    dep = dataclasses.replace(dep,
                              launch=dataclasses.replace(dep.launch, argv=(program, "-m", "x.gguf"), program=program))
    assert ("SP-CUDA-003" in codes(run_checks(dep))) is fails
