"""vLLM on AMD GPUs (ROCm): lookups in knowledge/rocm.yaml, for the ROCm rules.

quantization_status(version, method, gfx_arch) says whether RocmPlatform.supported_quantization
of that release lists the method for that gfx target.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.engines import knowledge as kb

GFX9 = ("gfx90a", "gfx942", "gfx950")  # vllm/platforms/rocm.py on_gfx9()


@dataclass(frozen=True)
class RocmQuant:
    status: str  # "supported" | "unsupported" | "unsure" | "unread"
    method: str
    offered: tuple[str, ...] = ()  # what the release offers on this gfx target
    gfx9_only_refusal: bool = False  # offered off gfx9 only (bitsandbytes in 0.12-0.16)
    versions: str = ""  # the row's range
    source: str = ""


def _names(method: str) -> set[str]:
    return {method, method.replace("_", "-"), method.replace("-", "_")}


def quantization_status(version: str, method: str, gfx_arch: str | None) -> RocmQuant:
    row = kb.row_for(kb.load_file("vllm", "rocm").quantization, version)
    if row is None:
        return RocmQuant("unread", method)
    off_gfx9 = tuple(row.not_on_gfx9 or ())
    offered = tuple(row.supported or ()) + (off_gfx9 if gfx_arch not in GFX9 else ())
    names = _names(method)
    if names & set(offered):
        status = "supported"
    elif names & set(row.unsure or ()):
        status = "unsure"
    else:
        status = "unsupported"
    return RocmQuant(status, method, offered, bool(names & set(off_gfx9)), row.versions, row.source)


def first_release_offering(method: str, after: str) -> str | None:
    """The first release read after `after` whose ROCm list offers `method` on every gfx target."""
    for row in kb.load_file("vllm", "rocm").quantization:
        if row.source.startswith("between reads"):
            continue
        # a read row: "==V" or ">=V,<=W" (equal reads); its first release is V
        release = row.versions.split(",")[0].lstrip("=><")
        if kb.release_version(release) > kb.release_version(after) and _names(method) & set(
            row.supported or ()
        ):
            return release
    return None


@dataclass(frozen=True)
class RocmAttention:
    """What RocmPlatform.get_attn_backend_cls does for a launch: a backend, an error, or unknown."""

    backend: str | None = None
    error: str | None = None  # the engine's message when it refuses
    category: str = "attention_backend"  # of the error: kv_cache_dtype when only the KV dtype is refused
    unknown: str | None = None  # why servepilot cannot tell
    forced: str | None = None  # the backend name the operator forced, and how
    forced_by: str | None = None
    note: str | None = None
    versions: str = ""
    source: str = ""
    fixes: tuple[tuple[str, str], ...] = ()  # (kind, change) the engine's own way out, if any


def _truthy(value) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes")


def attention_choice(dep, version: str, kv_cache_dtype: str | None) -> RocmAttention:
    """vLLM's ROCm attention choice for `dep` on its first GPU (knowledge/rocm.yaml `attention`)."""
    from servepilot.engines.vllm.resolve import _forced_backend

    row = kb.row_for(kb.load_file("vllm", "rocm").attention, version)
    if row is None:
        return RocmAttention(unknown=f"vLLM {version}'s ROCm attention selection was not read "
                                     "(servepilot read 0.5.1-0.6.x, 0.7.2-0.8.2, "
                                     "0.8.5-0.34.0)")
    where = {"versions": row.versions, "source": row.source}
    spec = dep.spec
    env = dep.launch.shell.env or {}
    arch = dep.cluster.gpus[0].gfx_arch
    kv = str(kv_cache_dtype or "auto")
    if spec is None or spec.attention is None:
        return RocmAttention(unknown="the model's attention geometry is unknown", **where)
    use_mla = bool(spec.is_mla) and not _truthy(env.get("VLLM_MLA_DISABLE"))
    use_sparse = use_mla and bool(spec.attention.sparse)
    forced, forced_by = _forced_backend(dep, version)
    aiter = _truthy(env.get("VLLM_ROCM_USE_AITER"))
    if row.mode == "v1_era":
        return _v1_era(row, where, use_mla, forced, forced_by, env, kv, arch, dep)
    if row.mode == "v0":
        return _v0_default(row, where, spec, use_mla, forced, forced_by, env, kv, arch, version)
    if row.mode == "validated":
        return _validated_default(row, where, use_mla, use_sparse, forced, forced_by, aiter, kv, arch,
                                  dep)
    if use_sparse:
        if row.sparse == "refused":
            return RocmAttention(error=row.sparse_message, **where)
        if kv.startswith("fp8") and row.sparse_fp8_kv_message:
            return RocmAttention(error=row.sparse_fp8_kv_message, category="kv_cache_dtype", **where)
        return RocmAttention(unknown=f"sparse MLA takes {row.sparse}, which asserts block size 1; "
                                     "servepilot does not know the block size ROCm gives it", **where)
    if forced:
        honoured = row.forced_mla if use_mla else row.forced_mha
        if forced in (honoured or ()):
            if forced in (row.gfx9_only or ()) and arch not in GFX9:
                return RocmAttention(error=row.gfx9_message.format(name=forced), forced=forced,
                                     forced_by=forced_by, **where)
            return _with_kv(RocmAttention(backend=forced, forced=forced, forced_by=forced_by, **where),
                            kv, arch)
        if use_mla:
            return RocmAttention(error=row.mla_other_message.format(name=forced), forced=forced,
                                 forced_by=forced_by, **where)
        if row.forced_others == "refused":
            return RocmAttention(error=row.forced_other_message.format(name=forced), forced=forced,
                                 forced_by=forced_by, **where)
        note = f"{forced_by} {forced} is ignored on ROCm in vLLM {version}: the default runs"
        return _with_kv(RocmAttention(backend=row.default_mha, note=note, **where), kv, arch)
    if aiter:
        return RocmAttention(unknown="VLLM_ROCM_USE_AITER=1 routes attention (and more) through AITER "
                                     "kernels, whose per-gfx support servepilot has not read", **where)
    if not use_mla and (env.get("VLLM_V1_USE_PREFILL_DECODE_ATTENTION") or env.get("VLLM_USE_V1") == "0"):
        return RocmAttention(unknown="a ROCm attention environment switch servepilot does not model "
                                     "(VLLM_V1_USE_PREFILL_DECODE_ATTENTION / VLLM_USE_V1=0)", **where)
    backend = row.default_mla if use_mla else row.default_mha
    return _with_kv(RocmAttention(backend=backend, **where), kv, arch)


def _v1_era(row, where, use_mla, forced, forced_by, env, kv, arch, dep):
    """0.8-0.10: only MLA models can be refused (AITER MLA's block size 1, forced backends)."""
    if not forced and env.get("VLLM_ATTENTION_BACKEND"):  # read by every release of this era
        forced, forced_by = str(env["VLLM_ATTENTION_BACKEND"]).upper(), "VLLM_ATTENTION_BACKEND"
        forced = forced.removesuffix("_VLLM_V1")
    if not use_mla:
        return _with_kv(RocmAttention(backend=row.default_mha, **where), kv, arch)
    if not row.aiter_mla:
        return _with_kv(RocmAttention(backend=row.default_mla, **where), kv, arch)
    block = _int(dep.launch.options.get("block_size")) or 16  # check_and_update_config's default
    aiter_mla = _truthy(env.get("VLLM_ROCM_USE_AITER")) and (
        env.get("VLLM_ROCM_USE_AITER_MLA") in (None, "") or _truthy(env.get("VLLM_ROCM_USE_AITER_MLA")))
    backend = forced or ("ROCM_AITER_MLA" if aiter_mla or block == 1 else "TRITON_MLA")
    extra = {"forced": forced, "forced_by": forced_by} if forced else {}
    if backend not in (row.forced_mla or ()):
        return RocmAttention(error=row.mla_other_message.format(name=backend), **extra, **where)
    if backend == "ROCM_AITER_MLA" and block != 1:
        fixes = (("flag", "--block-size 1"),) + (
            () if forced else (("env", "export VLLM_ROCM_USE_AITER_MLA=0 (TRITON_MLA)"),))
        return RocmAttention(error=row.aiter_mla_block_message.format(block=block), **extra,
                             fixes=fixes, **where)
    if backend == "TRITON_MLA" and block == 1:
        return RocmAttention(error=row.triton_mla_block_message, **extra, **where)
    return _with_kv(RocmAttention(backend=backend, **extra, **where), kv, arch)


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _v0_default(row, where, spec, use_mla, forced, forced_by, env, kv, arch, version):
    """0.5-0.7: the V0 engine's ROCm selection, ROCM_FLASH (TRITON_MLA for MLA from 0.7.2).

    A forced backend is logged and replaced; ROCmFlashAttentionImpl refuses a head size
    PagedAttention (its decode kernel) lacks. 0.7's V1 (VLLM_USE_V1=1) is not modelled."""
    from servepilot.engines.vllm.resolve import _head_size

    if env.get("VLLM_USE_V1") not in (None, "", "0"):
        return RocmAttention(unknown=f"VLLM_USE_V1={env.get('VLLM_USE_V1')}: vLLM {version}'s "
                                     "V1 engine on ROCm was not read", **where)
    if use_mla and not row.default_mla:
        return RocmAttention(unknown=f"vLLM {version} has no MLA backend on ROCm; servepilot did "
                                     "not read how it runs an MLA model there", **where)
    backend = row.default_mla if use_mla else row.default_mha
    note = (f"{forced_by} {forced} is not supported in AMD GPUs (vLLM {version}): "
            f"{backend} runs" if forced and forced != backend else None)
    head = _head_size(spec, use_mla)
    v0 = kb.row_for(kb.load_file("vllm", "old_attention").v0_selection, version)
    sizes = list(v0.paged_head_sizes or ()) if v0 is not None else []
    if backend == "ROCM_FLASH" and head is not None and sizes and head not in sizes:
        return RocmAttention(error=(f"ValueError: Head size {head} is not supported by "
                                    f"PagedAttention. Supported head sizes are: {sizes}."),
                             versions=where["versions"],
                             source=f"{where['source']}; {v0.source}")
    return _with_kv(RocmAttention(backend=backend, note=note, **where), kv, arch)


def _validated_default(row, where, use_mla, use_sparse, forced, forced_by, aiter, kv, arch, dep):
    """0.18-0.20: the validated selection's default path, and (0.19-0.20) a forced backend."""
    checks = dict(row.forced_checks or {})
    if forced and forced in checks and not use_sparse:
        return _validated_forced(row, where, checks[forced], use_mla, forced, forced_by, kv, arch,
                                 dep)
    if forced or use_sparse or aiter or dep.launch.options.get("attention_config"):
        what = (f"{forced_by} {forced}" if forced else "sparse MLA" if use_sparse
                else "VLLM_ROCM_USE_AITER=1" if aiter else "--attention-config")
        return RocmAttention(unknown=f"{what}: vLLM's validated ROCm selection beyond its default "
                                     "path (per-backend ROCm facts) was not read", **where)
    from servepilot.engines.vllm.resolve import _head_size, _model_dtype

    backend = row.default_mla if use_mla else row.default_mha
    dtypes = row.mla_dtypes if use_mla else row.mha_dtypes
    dtype = _model_dtype(dep.spec, dep.launch.options)
    head = _head_size(dep.spec, use_mla)
    reasons = []
    if dtype and dtypes and dtype not in dtypes:
        reasons.append(f"dtype {dtype} not supported")
    if not use_mla and head is not None and row.min_head_size and head < row.min_head_size:
        reasons.append(f"head_size {head} not supported")
    if reasons:
        return RocmAttention(error=(f"ValueError: No valid attention backend found for rocm ... Reasons: "
                                    f"{{{backend}: [{', '.join(reasons)}]}}."), **where)
    first = dict(row.forced_checks or {}).get(row.first_mha) if row.first_mha else None
    if not use_mla and first is not None:
        if not _backend_reasons(first, dep, use_mla, dtype, head, arch):
            backend = row.first_mha  # the first in priority, valid for this model
        else:
            backend = f"{backend} (or ROCM_AITER_UNIFIED_ATTN on gfx9 with AITER installed)"
    return _with_kv(RocmAttention(backend=backend, **where), kv, arch)


def _backend_reasons(check: dict, dep, use_mla: bool, dtype, head, arch) -> list[str]:
    """validate_configuration's reasons for one backend's facts (knowledge/rocm.yaml)."""
    from servepilot.engines.vllm.resolve import _has_sink

    reasons = []
    sizes = check.get("head_sizes")
    if head is not None and ((sizes and head not in sizes)
                             or head < int(check.get("min_head_size") or 0)):
        reasons.append("head_size not supported")
    if dtype and dtype not in check.get("dtypes", ()):
        reasons.append("dtype not supported")
    if bool(check.get("mla")) != use_mla:
        reasons.append("MLA not supported" if use_mla else "non-MLA not supported")
    if dep.spec is not None and _has_sink(dep.spec) and not check.get("sinks"):
        reasons.append("attention sinks not supported")
    if check.get("gfx") and arch not in check["gfx"]:
        reasons.append("compute capability not supported")
    return reasons


def _validated_forced(row, where, check, use_mla, forced, forced_by, kv, arch, dep):
    from servepilot.engines.vllm.resolve import _head_size, _model_dtype

    dtype = _model_dtype(dep.spec, dep.launch.options)
    reasons = _backend_reasons(check, dep, use_mla, dtype, _head_size(dep.spec, use_mla), arch)
    if reasons:
        return RocmAttention(error=(f"ValueError: Selected backend AttentionBackendEnum.{forced} is "
                                    f"not valid for this configuration. Reason: {reasons}"),
                             forced=forced, forced_by=forced_by, **where)
    return _with_kv(RocmAttention(backend=forced, forced=forced, forced_by=forced_by, **where),
                    kv, arch)


def _with_kv(choice: RocmAttention, kv: str, arch: str | None) -> RocmAttention:
    """An fp8 KV cache on the chosen backend: not read for ROCm, so unknown (the choice is kept)."""
    if not kv.startswith("fp8"):
        return choice
    from dataclasses import replace

    return replace(choice, unknown=f"whether {choice.backend} stores a {kv} KV cache on {arch} "
                                   "(its ROCm kernels' FP8 support was not read)")


@dataclass(frozen=True)
class RocmBuild:
    status: str  # "covered" | "missing" | "unsure" | "unread"
    gfx: tuple[str, ...] = ()
    versions: str = ""
    source: str = ""


def build_status(version: str, gfx_arch: str | None) -> RocmBuild:
    """Whether vLLM's ROCm image for `version` compiles its kernels for `gfx_arch`."""
    row = kb.row_for(kb.load_file("vllm", "rocm").builds, version)
    if row is None or not gfx_arch:
        return RocmBuild("unread")
    gfx = tuple(row.gfx or ())
    if gfx_arch in gfx:
        status = "covered"
    elif gfx_arch in (row.unsure or ()):
        status = "unsure"
    else:
        status = "missing"
    return RocmBuild(status, gfx, row.versions, row.source)


# vLLM's own ROCm image (engines/images.yaml); another image (AMD's rocm/vllm, a fork built for
# gfx906) compiles for targets servepilot has not read
OFFICIAL_IMAGES = ("vllm/vllm-openai-rocm", "docker.io/vllm/vllm-openai-rocm")


def build_for(dep, version: str) -> RocmBuild:
    """build_status for the build this launch runs: PYTORCH_ROCM_ARCH in its environment (a
    build from source for those targets) covers what it names; an image other than vLLM's own
    is "unread"; otherwise vLLM's image (and its documented source-build default)."""
    gfx_arch = dep.cluster.gpus[0].gfx_arch
    env = dep.launch.shell.env or {}
    own = [a.strip() for a in str(env.get("PYTORCH_ROCM_ARCH", "")).replace(",", ";").split(";")]
    if gfx_arch and gfx_arch in own:
        return RocmBuild("covered", tuple(a for a in own if a), "", "PYTORCH_ROCM_ARCH in the command")
    container = getattr(dep.launch.shell, "container", None)
    image = getattr(container, "image", None)
    if image:
        from servepilot.engines.containers import split_image

        if split_image(image)[0] not in OFFICIAL_IMAGES:
            return RocmBuild("unread", source=f"image {image}")
    return build_status(version, gfx_arch)


def build_reads() -> list[str]:
    """The releases whose ROCm image build targets servepilot read, oldest first."""
    return [str(r) for r in kb.load_file("vllm", "rocm").build_reads]


@dataclass(frozen=True)
class RocmRefusal:
    """A kernel the launch needs that fails on this gfx target (an engine or runtime error)."""

    error: str
    why: str  # the mechanism, in servepilot's words
    versions: str = ""
    source: str = ""
    escape: str | None = None  # an environment switch that avoids the kernel, when one exists
    kind: str = ""  # which kernel: "attention" / "fused_moe" for the Triton refusal


def _use_v1(env, engine: str) -> bool | None:
    """Whether the V1 engine runs (None: it depends on vLLM's V1 oracle)."""
    flag = str(env.get("VLLM_USE_V1", "")).strip()
    if engine == "v1":
        return True
    if engine == "v0":
        return False
    if flag:
        return flag != "0"
    return False if engine == "v0_v1_opt_in" else None


def triton_attention_refusal(dep, version: str) -> RocmRefusal | None:
    """vLLM's ROCm attention needs Triton kernels and Triton has no target for the GPU."""
    arch = dep.cluster.gpus[0].gfx_arch
    facts = kb.load_file("vllm", "rocm")
    targets = kb.row_for(facts.triton_amd_targets, version)
    row = kb.row_for(facts.triton_attention, version)
    if not arch or targets is None or row is None or arch in (targets.gfx or ()):
        return None
    env = dep.launch.shell.env or {}
    if _other_triton(dep, env):
        return None  # a fork's image or a Triton on PYTHONPATH (gfx906 ports exist): not read
    v1 = _use_v1(env, row.engine)
    triton_fa_off = str(env.get("VLLM_USE_TRITON_FLASH_ATTN", "1")).strip().lower() in (
        "0", "false", "no")
    mla = bool(dep.spec is not None and dep.spec.is_mla) and not _truthy(env.get("VLLM_MLA_DISABLE"))
    mla_triton = mla and row.engine != "v0"  # TRITON_MLA from 0.7.2
    # fused_moe's expert kernel is Triton in every release (AITER's MoE is gfx9 only)
    moe = bool(dep.spec is not None and dep.spec.is_moe)
    if v1 is None and triton_fa_off and not (mla_triton or moe):
        return None  # V0 with SDPA prefill or V1 (Triton): the oracle decides, not read
    if v1 is False and triton_fa_off and not (mla_triton or moe):
        return None  # V0 prefill through CK flash-attn or PyTorch SDPA
    attention = bool(v1 or mla_triton or not triton_fa_off)
    if v1:
        what = "the V1 engine's attention backends (TRITON_ATTN / ROCM_ATTN / TRITON_MLA)"
    elif mla_triton:
        what = "TRITON_MLA"
    elif not triton_fa_off and v1 is False:
        what = ("ROCM_FLASH's prefill (Triton flash attention, VLLM_USE_TRITON_FLASH_ATTN=1 by "
                "default)")
    elif not triton_fa_off:
        what = ("TRITON_ATTN (the V1 engine, its default) or, if it falls back to V0, "
                "ROCM_FLASH's Triton prefill")
    else:
        what = "fused_moe's Triton expert kernel (the model is MoE)"
    # the switch only helps the V0 engine; 0.8-0.10 may run V1 whatever it says
    escape = ("VLLM_USE_TRITON_FLASH_ATTN=0" if v1 is False and not (mla_triton or moe)
              else None)
    kernel = "attention" if attention else "fused_moe"
    return RocmRefusal(
        error=f"error: unsupported target: '{arch}' (Triton, compiling vLLM's {kernel} kernel)",
        kind=kernel,
        why=f"vLLM {version} runs {what} on ROCm, written in Triton; Triton's AMD backend has no "
            f"ISA family for {arch}, so the kernel cannot be compiled at the first forward pass",
        versions=row.versions,
        source=f"{row.source}; {targets.source}",
        escape=escape,
    )


def _other_triton(dep, env) -> bool:
    """Whether the launch may run a Triton other than the one vLLM's ROCm wheel or image pins."""
    if "triton" in str(env.get("PYTHONPATH", "")).lower():
        return True
    container = getattr(dep.launch.shell, "container", None)
    image = getattr(container, "image", None)
    if image:
        from servepilot.engines.containers import split_image

        return split_image(image)[0] not in OFFICIAL_IMAGES
    return False


def fp8_compute_refusal(dep, version: str, method: str | None) -> RocmRefusal | None:
    """An FP8 checkpoint (or --quantization fp8) on a gfx target torch has no FP8 GEMM for."""
    arch = dep.cluster.gpus[0].gfx_arch
    row = kb.row_for(kb.load_file("vllm", "rocm").fp8_compute, version)
    if not arch or row is None or not method:
        return None
    quant = getattr(dep.spec, "quant", None)
    ct_fp8 = bool(_names(method) & {"compressed-tensors"}) and getattr(
        quant, "quant_algo", None) in (row.ct_schemes or ())
    if not (_names(method) & set(row.methods or ()) or ct_fp8) or arch in (row.gfx or ()):
        return None
    if ct_fp8:
        method = f"{method} FP8 (W8A8)"
    return RocmRefusal(
        error=f"RuntimeError: torch._scaled_mm is not supported on {arch} (FP8 GEMMs on ROCm: "
              f"{', '.join(row.gfx)})",
        why=f"vLLM {version} runs {method} weights through FP8 GEMMs on ROCm (no weight-only "
            f"fallback there), and {arch} has no FP8 matrix instructions torch can use",
        versions=row.versions,
        source=row.source,
    )


def aiter_fp4_bmm_refusal(dep, version: str, method: str | None) -> RocmRefusal | None:
    """0.16: AITER's MXFP4 batched matmul for an unquantized MLA model, on a GPU without FP4."""
    from servepilot.engines.vllm.resolve import _model_dtype

    arch = dep.cluster.gpus[0].gfx_arch
    row = kb.row_for(kb.load_file("vllm", "rocm").aiter_fp4_bmm, version)
    env = dep.launch.shell.env or {}
    if not arch or row is None or row.gfx or arch == "gfx950":
        return None
    fp4_env = env.get("VLLM_ROCM_USE_AITER_FP4BMM")
    fp4_on = _truthy(fp4_env) if fp4_env not in (None, "") else bool(row.default_on)
    spec = dep.spec
    mla = spec is not None and spec.is_mla and not _truthy(env.get("VLLM_MLA_DISABLE"))
    if not (_truthy(env.get("VLLM_ROCM_USE_AITER")) and fp4_on and mla) or method:
        return None  # a quantized checkpoint's kv_b_proj is not bfloat16: no FP4 path
    if _model_dtype(spec, dep.launch.options) != "bfloat16":
        return None
    return RocmRefusal(
        error=f"RuntimeError: MXFP4 quantization is not supported on {arch} (AITER "
              "dynamic_mxfp4_quant, MLA kv_b_proj)",
        why=f"vLLM {version} with VLLM_ROCM_USE_AITER=1 quantizes the MLA kv_b_proj weight to "
            f"MXFP4 for AITER's FP4 batched matmul (VLLM_ROCM_USE_AITER_FP4BMM, on by default) "
            f"without checking the GPU; MXFP4 needs gfx950 (later releases gate it there)",
        versions=row.versions,
        source=row.source,
        escape="VLLM_ROCM_USE_AITER_FP4BMM=0",
    )


def act_dtype_refusal(dep, version: str, method: str | None) -> RocmRefusal | None:
    """The model dtype is not among the quantization method's supported activation dtypes."""
    from servepilot.engines.vllm.resolve import _model_dtype

    if not method:
        return None
    rows = [r for r in kb.rows_for(kb.load_file("vllm", "rocm").act_dtypes, version)
            if _names(method) & {r.method}]
    dtype = _model_dtype(dep.spec, dep.launch.options)
    if not rows or not dtype or dtype in (rows[0].dtypes or ()):
        return None
    row = rows[0]
    torch_names = {"float16": "torch.float16", "bfloat16": "torch.bfloat16",
                   "float32": "torch.float32"}
    listed = ", ".join(torch_names.get(d, d) for d in row.dtypes)
    return RocmRefusal(
        error=f"ValueError: {torch_names.get(dtype, dtype)} is not supported for quantization "
              f"method {method}. Supported dtypes: [{listed}]",
        why=f"the model runs in {dtype} and vLLM's {method} kernels take {', '.join(row.dtypes)} "
            "activations only (on ROCm no Marlin variant replaces the method)",
        versions=row.versions,
        source=row.source,
    )
