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
        if not row.versions.startswith("=="):
            continue
        release = row.versions[2:]
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


def _truthy(value) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes")


def attention_choice(dep, version: str, kv_cache_dtype: str | None) -> RocmAttention:
    """vLLM's ROCm attention choice for `dep` on its first GPU (knowledge/rocm.yaml `attention`)."""
    from servepilot.engines.vllm.resolve import _forced_backend

    row = kb.row_for(kb.load_file("vllm", "rocm").attention, version)
    if row is None:
        return RocmAttention(unknown=f"vLLM {version}'s ROCm attention selection was not read "
                                     "(servepilot read 0.11.0-0.18.0)")
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


def _validated_default(row, where, use_mla, use_sparse, forced, forced_by, aiter, kv, arch, dep):
    """0.18: the default path of the validated selection (TRITON_ATTN / TRITON_MLA alone)."""
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
    return _with_kv(RocmAttention(backend=backend, **where), kv, arch)


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
