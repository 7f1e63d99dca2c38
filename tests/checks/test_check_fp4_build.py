"""vLLM's NVFP4 kernels are compiled for sm_100a / sm_120a only in the CUDA 12.x wheels."""

from __future__ import annotations

import pytest
from checkfixtures import GIB, codes, deployment, finding, llama_like

from servepilot.checks import run_checks

NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
CT_NVFP4 = {
    "quant_method": "compressed-tensors",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "float", "group_size": 16},
            "input_activations": {"num_bits": 4, "type": "float", "group_size": 16},
        }
    },
}


@pytest.mark.parametrize(
    "version, cc, refused",
    [
        ("0.12.0", (12, 1), True),  # GB10: sm_120a code does not run on 12.1
        ("0.11.0", (10, 3), True),  # B300: sm_100a code does not run on 10.3
        ("0.10.1", (12, 1), True),
        ("0.10.0", (12, 1), False),  # its CMakeLists.txt not read: no claim
        ("0.19.0", (12, 1), True),
        ("0.12.0", (12, 0), False),
        ("0.12.0", (10, 0), False),
        ("0.16.0", (12, 1), False),  # 0.15-0.18 not read: no claim
        ("0.34.0", (12, 1), False),  # CUDA 13 wheels: not read, no claim
    ],
)
def test_nvfp4_kernels_cover_exact_capabilities_only(tmp_path, version, cc, refused):
    path = llama_like(tmp_path / "m", quant=NVFP4)
    result = run_checks(deployment(path, cc=cc, n=1, version=version, memory=120 * GIB))
    assert ("SP-CUDA-004" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-CUDA-004")
        assert f.category == "cuda_driver_arch" and f.severity == "error"
        assert f"sm_{cc[0]}{cc[1]}" in f.title and "no kernel image" in f.detail


def test_compressed_tensors_nvfp4_is_the_same_kernels(tmp_path):
    path = llama_like(tmp_path / "m", quant=CT_NVFP4)
    assert "SP-CUDA-004" in codes(
        run_checks(deployment(path, cc=(12, 1), n=1, version="0.12.0", memory=120 * GIB))
    )


def test_a_probed_build_or_another_scheme_is_not_judged_here(tmp_path):
    path = llama_like(tmp_path / "m", quant=NVFP4)
    probed = deployment(
        path, cc=(12, 1), n=1, version="0.12.0", memory=120 * GIB, arch_list=("12.1",)
    )
    assert "SP-CUDA-004" not in codes(run_checks(probed))
    fp8 = llama_like(tmp_path / "f", quant={"quant_method": "fp8", "activation_scheme": "dynamic"})
    assert "SP-CUDA-004" not in codes(
        run_checks(deployment(fp8, cc=(12, 1), n=1, version="0.12.0", memory=120 * GIB))
    )


def test_the_build_remedy_is_listed_by_fix_not_turned_into_pip_install(tmp_path):
    # pip install 'vllm' with no specifier would reinstall the CUDA 12 wheel the finding is about
    from servepilot.fix import remedy_options

    path = llama_like(tmp_path / "m", quant=NVFP4)
    dep = deployment(path, cc=(12, 1), n=1, version="0.12.0", memory=120 * GIB)
    result = run_checks(dep)
    options = [o for o in remedy_options(dep, result.findings) if o.finding == "SP-CUDA-004"]
    build = next(o for o in options if o.kind == "upgrade")
    assert not build.applicable and "build" in build.why_not
