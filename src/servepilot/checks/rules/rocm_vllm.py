"""vLLM on AMD GPUs (ROCm): the quantization methods each release accepts there, and what
servepilot cannot judge on ROCm (attention backends, kernels) named as unknowns.

The facts are in engines/vllm/knowledge/rocm.yaml, read from vllm/platforms/rocm.py per release.
Only rules that declare platforms=("rocm",) or platforms=ANY_PLATFORM (checks/platforms.py) run on
an AMD GPU; the CUDA ones (compute capability, Marlin, CUDA wheels) do not.
"""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule
from servepilot.checks.unknowns import Unknown

KNOWLEDGE = "servepilot/engines/vllm/knowledge/rocm.yaml"


def _version(dep, ctx) -> str | None:
    return dep.engine_version or getattr(ctx.resolution, "engine_version", None)


def _method(dep, version: str) -> str | None:
    """The quantization method vLLM verifies: --quantization, else the checkpoint's declaration."""
    from servepilot.engines.vllm.resolve import engine_quant_method

    try:
        return engine_quant_method(
            dep, None, version
        )  # no compute capability: no CUDA Marlin override
    except Exception:  # noqa: BLE001 - an unreadable declaration is the quantization unknown's business
        return None


def quant_status(dep, ctx):
    """engines.vllm.rocm.RocmQuant for the launch's quantization, or None when it names none."""
    from servepilot.engines.vllm.rocm import quantization_status

    version = _version(dep, ctx)
    method = _method(dep, version) if version else None
    if not method:
        return None
    return quantization_status(version, method, dep.cluster.gpus[0].gfx_arch)


@rule(
    "SP-ROCM-001",
    "quantization_support",
    "Quantization method not offered by vLLM on ROCm",
    facts=(
        "On ROCm, ModelConfig verifies the quantization method against "
        "RocmPlatform.supported_quantization and stops: '<method> quantization is currently not "
        "supported in rocm.'",
        "The list grew per release (0.5.1-0.5.4: gptq, squeezellm; 0.5.5 adds fp8, 0.6.0 awq, "
        "0.6.2 compressed-tensors, 0.6.6 gguf, 0.7.0 quark, 0.10.1 mxfp4, ...); bitsandbytes is "
        "offered only off gfx9 in 0.12-0.16 (warp size 64).",
    ),
    sources=(KNOWLEDGE, "vllm/platforms/interface.py@v0.16.0 (Platform.verify_quantization)"),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_quant_unsupported(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.rocm import first_release_offering

    q = quant_status(dep, ctx)
    if q is None or q.status != "unsupported":
        return []
    version = _version(dep, ctx)
    g = dep.cluster.gpus[0]
    from servepilot.engines import knowledge as kb

    # before 0.6.6 ModelConfig raised its own message ("... in ROCm.")
    where = "ROCm" if kb.release_version(version) < kb.release_version("0.6.6") else "rocm"
    detail = (
        f"vLLM {version} on {g.name} ({g.gfx_arch}) will stop at start-up: {q.method} quantization is "
        f"currently not supported in {where}."
        + (
            f" {q.method} is offered only off gfx9 (gfx90a/gfx942/gfx950)."
            if q.gfx9_only_refusal
            else ""
        )
        + f" Offered on ROCm: {', '.join(q.offered)}."
    )
    usual = [m for m in q.offered if m in ("fp8", "gptq", "awq", "quark")]
    remedies = [
        Remedy(
            "overlay",
            f"a checkpoint of the same model in a method vLLM offers on ROCm ({', '.join(usual)})",
            "another download; quality may differ",
            None,
        )
    ]
    later = None if q.gfx9_only_refusal else first_release_offering(q.method, version)
    if later:
        remedies.insert(
            0,
            Remedy(
                "upgrade",
                f"pip install 'vllm>={later}' (a ROCm build)",
                "a new engine release to install and validate",
                None,
            ),
        )
    if q.gfx9_only_refusal:
        remedies.append(
            Remedy(
                "hardware",
                "an AMD GPU outside gfx9 (Radeon gfx11/gfx12)",
                "different hardware",
                None,
            )
        )
    return [
        Finding(
            "SP-ROCM-001",
            "quantization_support",
            "error",
            f"{q.method} is not offered by vLLM {version} on ROCm",
            detail,
            (
                Evidence(
                    f"RocmPlatform.supported_quantization in vLLM {q.versions} on {g.gfx_arch}: "
                    f"{', '.join(q.offered)}",
                    q.source,
                ),
                Evidence(f"GPU {g.name}: {g.gfx_arch}", "servepilot/hardware/data/gpus.json"),
            ),
            tuple(remedies),
        )
    ]


def attention_on_rocm(dep, ctx):
    """engines.vllm.rocm.RocmAttention for the launch (cached on the context: three callers)."""
    from servepilot.engines.vllm.rocm import attention_choice

    cached = getattr(ctx, "_rocm_attention", None)
    if cached is None:
        kv = getattr(ctx.resolution, "kv_cache_dtype", None) or dep.launch.get("kv_cache_dtype")
        cached = attention_choice(dep, _version(dep, ctx), kv)
        ctx._rocm_attention = cached
    return cached


def _attention_finding(dep, ctx, code: str, category: str) -> list[Finding]:
    choice = attention_on_rocm(dep, ctx)
    if choice.error is None or choice.category != category:
        return []
    g = dep.cluster.gpus[0]
    version = _version(dep, ctx)
    evidence = [Evidence(f"RocmPlatform.get_attn_backend_cls in vLLM {choice.versions}", choice.source)]
    remedies = []
    if choice.forced:
        evidence.append(Evidence(f"{choice.forced_by} {choice.forced}", "command line"))
        remedies.append(Remedy("flag", f"drop {choice.forced_by} {choice.forced} (ROCm picks TRITON_ATTN"
                                       " / TRITON_MLA)", "the default backend's speed", None))
    for kind, change in choice.fixes:
        remedies.append(Remedy(kind, change, "a different kernel path", None))
    if category == "kv_cache_dtype":
        remedies.append(Remedy("flag", "--kv-cache-dtype auto (a 16-bit KV cache)",
                               "KV cache bytes per token double", None))
    if not choice.forced and not choice.fixes and category == "attention_backend":
        remedies.append(Remedy("upgrade", "pip install 'vllm>=0.12.0' (a ROCm build)",
                               "a new engine release to install and validate", None))
    title = f"vLLM {version} on {g.gfx_arch} refuses this attention configuration"
    detail = f"vLLM {version} on {g.name} ({g.gfx_arch}) will stop building the model: {choice.error}"
    return [Finding(code, category, "error", title, detail, tuple(evidence), tuple(remedies))]


@rule(
    "SP-ROCM-002", "attention_backend", "vLLM's ROCm attention selection refuses the configuration",
    facts=("0.11.0: sparse MLA (DeepSeek-V3.2) raises 'Sparse Attention is not supported on ROCm.'",
           "0.12-0.17: a forced backend ROCm does not offer raises 'Attention backend X is not "
           "supported on ROCm'; ROCM_AITER_FA forced off gfx9 raises 'only supported on gfx9'; a "
           "non-MLA backend forced for an MLA model raises 'is not MLA type'."),
    sources=(KNOWLEDGE, "vllm/platforms/rocm.py@v0.16.0 (RocmPlatform.get_attn_backend_cls)"),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_attention_refused(dep, ctx) -> list[Finding]:
    return _attention_finding(dep, ctx, "SP-ROCM-002", "attention_backend")


@rule(
    "SP-ROCM-003", "kv_cache_dtype", "vLLM's ROCm sparse MLA backend refuses an FP8 KV cache",
    facts=("0.12-0.17: sparse MLA on ROCm runs ROCM_AITER_MLA_SPARSE, which raises "
           "'ROCMAiterMLASparseBackend doesn't support fp8 kv_cache_dtype.'",),
    sources=(KNOWLEDGE, "vllm/platforms/rocm.py@v0.16.0 (RocmPlatform.get_attn_backend_cls)"),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_sparse_fp8_kv(dep, ctx) -> list[Finding]:
    return _attention_finding(dep, ctx, "SP-ROCM-003", "kv_cache_dtype")


@rule(
    "SP-ROCM-004", "cuda_driver_arch", "vLLM's ROCm image has no kernels for this gfx target",
    facts=("vLLM's ROCm image compiles its kernels for the gfx targets of PYTORCH_ROCM_ARCH in "
           "docker/Dockerfile.rocm_base (0.6.6: gfx908, gfx90a, gfx942, gfx1100; 0.8.5: gfx90a, "
           "gfx942, gfx1100-gfx1201; gfx950 from 0.11.0; gfx1150/gfx1151 by 0.14.1).",
           "On another target the first kernel fails: 'HIP error: invalid device function'."),
    sources=(KNOWLEDGE,),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_build_targets(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.rocm import build_for

    version = _version(dep, ctx)
    g = dep.cluster.gpus[0]
    b = build_for(dep, version) if version else None
    if b is None or b.status != "missing":
        return []
    later = _first_build_with(g.gfx_arch, version)
    remedies = [Remedy("env", f"build vLLM from source with PYTORCH_ROCM_ARCH={g.gfx_arch}",
                       "a source build of vLLM and its ROCm kernels (hours)", None)]
    if later:
        remedies.insert(0, Remedy("upgrade", f"the vLLM ROCm image of {later} or later",
                                  "a new engine release to install and validate", None))
    remedies.append(Remedy("hardware", f"an AMD GPU the image targets ({', '.join(b.gfx)})",
                           "different hardware", None))
    return [Finding(
        "SP-ROCM-004", "cuda_driver_arch", "error",
        f"vLLM {version}'s ROCm build has no kernels for {g.gfx_arch} ({g.name})",
        f"vLLM {version}'s ROCm image compiles its kernels for {', '.join(b.gfx)}; {g.name} is "
        f"{g.gfx_arch}. The first kernel launch fails with 'HIP error: invalid device function'. "
        f"A build from source with PYTORCH_ROCM_ARCH={g.gfx_arch} would differ.",
        (Evidence(f"PYTORCH_ROCM_ARCH in vLLM {b.versions}: {';'.join(b.gfx)}", b.source),
         Evidence(f"{g.name}: {g.gfx_arch}", "servepilot/hardware/data/gpus.json")),
        tuple(remedies),
    )]


def _first_build_with(gfx: str, after: str) -> str | None:
    from servepilot.engines import knowledge as kb
    from servepilot.engines.vllm.rocm import build_reads, build_status

    for release in build_reads():
        if kb.release_version(release) > kb.release_version(after):
            if build_status(release, gfx).status == "covered":
                return release
    return None


def rocm_vllm_unknowns(dep, ctx) -> list[Unknown]:
    """What servepilot cannot judge for vLLM on an AMD GPU (checks/platforms.py asks)."""
    from servepilot.engines.vllm.rocm import build_for

    g = dep.cluster.gpus[0]
    version = _version(dep, ctx)
    out = []
    choice = attention_on_rocm(dep, ctx)
    if choice.error is None and choice.unknown:
        out.append(Unknown(
            "attention backend on ROCm",
            f"{choice.unknown} (vLLM {version} on {g.gfx_arch})",
            "the engine's own start-up on this GPU (servepilot launch), or --engine-version of a "
            "release whose ROCm selection servepilot read (0.5.1-0.6.x, 0.7.2-0.8.2, "
            "0.8.5-0.34.0)",
        ))
    elif choice.backend:
        ctx.notes.append(f"ROCm attention: {choice.backend} ({choice.source})"
                         + (f"; {choice.note}" if choice.note else ""))
    build = build_for(dep, version)
    if build.status in ("unsure", "unread"):
        if build.source.startswith("image "):
            why = f"whether {build.source} carries kernels for {g.gfx_arch}: not vLLM's own image"
        else:
            why = (f"whether vLLM {version}'s ROCm image carries kernels for {g.gfx_arch}: "
                   + ("the releases read around it disagree" if build.status == "unsure"
                      else "its build targets were not read"))
        out.append(Unknown(
            "ROCm build targets", why,
            "PYTORCH_ROCM_ARCH of the build you run (a source build's own list), or --engine-version "
            "of a release servepilot read (0.6.2 to 0.34.0)",
        ))
    q = quant_status(dep, ctx)
    if q is not None and q.status == "unsure":
        out.append(
            Unknown(
                "quantization on ROCm",
                f"whether vLLM {version} offers {q.method} on ROCm: the releases read around it "
                f"({q.versions}) disagree",
                "--engine-version of a release servepilot has read (0.5.1-0.6.4, 0.6.6, 0.7.0, "
                "0.7.2-0.8.2, 0.8.5, 0.9.1-0.14.1, 0.16.0-0.34.0)",
            )
        )
    elif q is not None and q.status == "unread":
        out.append(
            Unknown(
                "quantization on ROCm",
                f"vLLM {version}'s ROCm quantization list was not read (servepilot read 0.5.1 "
                "to 0.34.0)",
                "--engine-version of a release servepilot has read",
            )
        )
    return out


def _refusal_finding(dep, ctx, code: str, category: str, refusal, title: str, extra_remedies=()):
    g = dep.cluster.gpus[0]
    remedies = []
    if refusal.escape:
        remedies.append(Remedy("env", f"export {refusal.escape}",
                               "a slower or unfused kernel path", None))
    remedies.extend(extra_remedies)
    return [Finding(
        code, category, "error", title,
        f"On {g.name} ({g.gfx_arch}): {refusal.why}. It stops at the first "
        f"forward pass (the profiling run, after the weights load): {refusal.error}",
        (Evidence(f"vLLM {refusal.versions} on ROCm", refusal.source),
         Evidence(f"{g.name}: {g.gfx_arch}", "servepilot/hardware/data/gpus.json")),
        tuple(remedies),
    )]


@rule(
    "SP-ROCM-005", "quantization_support", "FP8 weights on an AMD GPU without FP8 GEMMs",
    facts=("vLLM's ROCm FP8 path has no weight-only fallback (0.5.x: Marlin only below "
           "capability 8.9, which no AMD GPU reports; 0.6-0.18 use_marlin = False on ROCm; 0.19+ "
           "no Marlin kernel in the ROCm FP8 list): FP8 checkpoints compute in FP8.",
           "torch._scaled_mm on ROCm accepts gfx940-gfx942 (and gfx950, gfx1200/gfx1201 in newer "
           "ROCm builds); gfx90a, gfx908, gfx906 and RDNA2/RDNA3 fail at the first forward pass."),
    sources=(KNOWLEDGE, "vllm/model_executor/layers/quantization/fp8.py@v0.14.1 (Fp8LinearMethod)"),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_fp8_without_fp8_gemm(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.rocm import fp8_compute_refusal

    version = _version(dep, ctx)
    method = _method(dep, version) if version else None
    refusal = fp8_compute_refusal(dep, version, method) if method else None
    if refusal is None:
        return []
    g = dep.cluster.gpus[0]
    remedies = (
        Remedy("overlay", "the model's 16-bit or a GPTQ/AWQ checkpoint (vLLM offers gptq/awq on "
                          "ROCm)", "another download; more memory for 16-bit weights", None),
        Remedy("hardware", "an AMD GPU with FP8 (MI300 series gfx942, MI350 gfx950, Radeon "
                           "RX 9000 gfx1201)", "different hardware", None),
    )
    return _refusal_finding(dep, ctx, "SP-ROCM-005", "quantization_support", refusal,
                            f"{method} runs FP8 GEMMs, which {g.gfx_arch} lacks", remedies)


@rule(
    "SP-ROCM-006", "attention_backend", "vLLM's ROCm attention needs Triton, which lacks this gfx",
    facts=("vLLM's ROCm attention is Triton: ROCM_FLASH's prefill (V0, unless "
           "VLLM_USE_TRITON_FLASH_ATTN=0), TRITON_MLA, and every V1 backend off gfx9.",
           "Triton's AMD backend knows CDNA1-4 (gfx908, gfx90a, gfx94x, gfx950) and RDNA1-4; on "
           "GCN5 (gfx900/gfx906: MI50, MI60) it stops: \"unsupported target: 'gfx906'\"."),
    sources=(KNOWLEDGE,),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_triton_target(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.rocm import triton_attention_refusal

    version = _version(dep, ctx)
    refusal = triton_attention_refusal(dep, version) if version else None
    if refusal is None or refusal.kind != "attention":
        return []
    g = dep.cluster.gpus[0]
    remedies = (Remedy("hardware", "an AMD GPU Triton targets (gfx908 or newer CDNA, RDNA2+)",
                       "different hardware", None),)
    return _refusal_finding(dep, ctx, "SP-ROCM-006", "attention_backend", refusal,
                            f"vLLM {version}'s attention kernels cannot be compiled for "
                            f"{g.gfx_arch}", remedies)


@rule(
    "SP-ROCM-007", "quantization_support", "AITER's MXFP4 batched matmul on a GPU without FP4",
    facts=("0.16: with VLLM_ROCM_USE_AITER=1, VLLM_ROCM_USE_AITER_FP4BMM (default on) quantizes "
           "an MLA model's bfloat16 kv_b_proj to MXFP4 on every gfx target; MXFP4 needs gfx950, "
           "and 0.17 gates it with on_gfx950().",),
    sources=(KNOWLEDGE, "vllm/_aiter_ops.py@v0.16.0 (is_fp4bmm_enabled)"),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_aiter_fp4_bmm(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.rocm import aiter_fp4_bmm_refusal

    version = _version(dep, ctx)
    method = _method(dep, version) if version else None
    refusal = aiter_fp4_bmm_refusal(dep, version, method) if version else None
    if refusal is None:
        return []
    remedies = (Remedy("upgrade", "pip install 'vllm>=0.17.0' (a ROCm build: FP4 BMM only on "
                                  "gfx950)", "a new engine release to install and validate", None),)
    return _refusal_finding(dep, ctx, "SP-ROCM-007", "quantization_support", refusal,
                            "AITER's MXFP4 batched matmul needs gfx950", remedies)


@rule(
    "SP-ROCM-008", "quantization_support", "The model dtype is one the quantization method refuses",
    facts=("VllmConfig._get_quantization_config stops when the model dtype is not in the method's "
           "get_supported_act_dtypes(): awq and gptq take float16 only, mxfp4 bfloat16 only; on "
           "ROCm no Marlin variant replaces awq/gptq.",),
    sources=(KNOWLEDGE, "vllm/config/vllm.py@v0.14.1 (_get_quantization_config)"),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_quant_act_dtype(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.rocm import act_dtype_refusal

    version = _version(dep, ctx)
    method = _method(dep, version) if version else None
    refusal = act_dtype_refusal(dep, version, method) if method else None
    if refusal is None:
        return []
    g = dep.cluster.gpus[0]
    dtypes = refusal.error.split("Supported dtypes: [")[-1].rstrip("]").replace("torch.", "")
    remedies = [Remedy("flag", f"--dtype {dtypes.split(', ')[0]}",
                       "the activations' precision changes", None)]
    if "bfloat16" in dtypes and g.gfx_arch == "gfx906":
        remedies = [Remedy("hardware", "an AMD GPU with bfloat16 (gfx90a or newer)",
                           "different hardware", None)]
    version_words = f"vLLM {version} on {g.name} ({g.gfx_arch})"
    return [Finding(
        "SP-ROCM-008", "quantization_support", "error",
        f"{method} does not run in this dtype", f"{version_words}: {refusal.why}. It stops while "
        f"building its configuration: {refusal.error}",
        (Evidence(f"get_supported_act_dtypes in vLLM {refusal.versions}", refusal.source),),
        tuple(remedies),
    )]


@rule(
    "SP-ROCM-009", "cuda_driver_arch", "vLLM's MoE kernel needs Triton, which lacks this gfx",
    facts=("fused_moe's expert kernel is Triton in every release (AITER's MoE runs on gfx9 only); "
           "with attention kept off Triton (V0, VLLM_USE_TRITON_FLASH_ATTN=0), a MoE model still "
           "compiles it, and Triton has no target for GCN5 (gfx900/gfx906).",),
    sources=(KNOWLEDGE,),
    engines=("vllm",),
    platforms=("rocm",),
)
def rocm_triton_moe_target(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.rocm import triton_attention_refusal

    version = _version(dep, ctx)
    refusal = triton_attention_refusal(dep, version) if version else None
    if refusal is None or refusal.kind != "fused_moe":
        return []
    g = dep.cluster.gpus[0]
    remedies = (Remedy("overlay", "a dense (non-MoE) model", "a different model", None),
                Remedy("hardware", "an AMD GPU Triton targets (gfx908 or newer CDNA, RDNA2+)",
                       "different hardware", None))
    return _refusal_finding(dep, ctx, "SP-ROCM-009", "cuda_driver_arch", refusal,
                            f"vLLM {version}'s MoE kernel cannot be compiled for {g.gfx_arch}",
                            remedies)
