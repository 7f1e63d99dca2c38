"""vLLM's NVFP4 kernels are built for exact Blackwell capabilities: 10.3, 11.x and 12.1 get none."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/vllm/knowledge/builds.yaml"


@rule(
    "SP-CUDA-004",
    "cuda_driver_arch",
    "vLLM's NVFP4 kernels have no code for this Blackwell GPU",
    facts=(
        "vLLM takes its NVFP4 path (its scaled_fp4_quant op, then a CUTLASS or FlashInfer GEMM) "
        "on every GPU of compute capability 10.0 or more.",
        "The PyPI wheels (CUDA below 13.0) build those kernels for the arch-specific targets "
        "sm_100a and sm_120a only, which run on exactly 10.0 and 12.0: on 10.3 (B300), 11.x or "
        "12.1 (GB10) the first FP4 kernel fails with 'no kernel image is available for "
        "execution on the device'. CUDA 13 builds use family targets (10.0f, 12.0f) instead.",
    ),
    sources=(
        KNOWLEDGE,
        "csrc/quantization/fp4/nvfp4_scaled_mm_entry.cu@v0.11.0 and @v0.14.1 "
        "(cutlass_scaled_mm_supports_fp4: capability >= 100)",
    ),
    engines=("vllm",),
)
def fp4_kernels_for_gpu(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.release import fp4_kernel_targets

    res = ctx.resolution
    spec = dep.spec
    if dep.cluster.torch_cuda_arch_list or not dep.engine_version or res.gpu_cc is None:
        return []  # an installed build was probed (SP-CUDA-001), or nothing to compare
    if spec is None or spec.quant is None or not _w4a4_nvfp4(spec.quant):
        return []
    row = fp4_kernel_targets(dep.engine_version)
    cc = res.gpu_cc
    cc_str = f"{cc[0]}.{cc[1]}"
    if row is None or cc[0] < 10 or cc_str in row.exact:
        return []
    gpu = next((g.name for g in dep.cluster.gpus if g.compute_capability == cc), "this GPU")
    targets = ", ".join(f"sm_{c.replace('.', '')}a" for c in row.exact)
    return [
        Finding(
            "SP-CUDA-004",
            "cuda_driver_arch",
            "error",
            f"vLLM {dep.engine_version}'s NVFP4 kernels have no code for sm_{cc[0]}{cc[1]} ({gpu})",
            "The checkpoint is NVFP4 (weights and activations in FP4), and vLLM takes its FP4 "
            f"path on compute capability {cc_str}; the prebuilt wheel (CUDA {row.wheel_cuda}) "
            f"compiles those kernels for {targets} only, which run on exactly "
            f"{' and '.join(row.exact)}. The first FP4 kernel will fail with 'no kernel image is "
            "available for execution on the device'. A build with CUDA 13 (family targets) or "
            "from source for this GPU would differ.",
            (
                Evidence(f"NVFP4 kernels: {targets} (CUDA {row.wheel_cuda} wheel)", row.source),
                Evidence(
                    f"{spec.quant.method} {spec.quant.quant_algo}", f"{spec.path}/config.json"
                ),
                Evidence(f"{gpu}: compute capability {cc_str}", f"cluster ({dep.cluster.source})"),
            ),
            (
                Remedy(
                    "upgrade",
                    "a vLLM build with CUDA 13 (family targets 10.0f/12.0f), or built from "
                    f"source with TORCH_CUDA_ARCH_LIST={cc_str}a",
                    "a different wheel or a local build",
                    {
                        "upgrade": {
                            "package": "vllm",
                            "build": f"CUDA 13 or TORCH_CUDA_ARCH_LIST={cc_str}a",
                        }
                    },
                ),
                Remedy(
                    "hardware",
                    f"GPUs of compute capability {' or '.join(row.exact)}",
                    "different hardware",
                    {"hardware": {"compute_capability": list(row.exact)}},
                ),
            ),
        )
    ]


def _w4a4_nvfp4(q) -> bool:
    """Weights and activations in NVFP4: ModelOpt NVFP4 or compressed-tensors nvfp4-pack W4A4."""
    algo = (q.quant_algo or "").upper()
    return (q.method == "modelopt" and algo == "NVFP4") or (
        q.method == "compressed-tensors" and algo == "NVFP4"
    )
