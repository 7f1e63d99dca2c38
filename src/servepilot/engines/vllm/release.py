"""What a vLLM release carries beyond its choices for one deployment (see ReleaseFacts):
its wheels' kernel architectures, options that need a GPU generation, how it takes a forced
attention backend, soft-capping and V1 FP8 KV support of old releases, its model registry and
config classes. The rules read these from the Resolution, never from the fact files."""

from __future__ import annotations

from servepilot.engines import knowledge as kb
from servepilot.engines.resolution import ReleaseFacts


def release_facts(dep, res) -> ReleaseFacts:
    # the version as given: the resolver clamps releases older than the first one read to it
    given = dep.engine_version
    version = given or res.engine_version
    builds = kb.load_file("vllm", "builds").wheels
    wheel = kb.row_for(builds, version) if version else None
    spec = dep.spec
    architecture = None
    if spec is not None and spec.architectures and res.engine_version is not None and version:
        architecture = architecture_status(spec.architectures[0], version)
    return ReleaseFacts(
        version=version,
        build_archs=(tuple(wheel.archs), wheel.source, f"vLLM {version}'s wheel") if wheel else None,
        wheel=wheel,
        wheels=builds,
        gpu_flags=tuple(kb.rows_for(kb.load_file("vllm",
                                                 "gpu_flags").flags, res.engine_version)) if res.engine_version else (),
        backend_forcing=kb.row_for(kb.load_file("vllm",
                                                "attention").forcing,
                                   res.engine_version) if res.engine_version else None,
        logits_soft_cap=kb.row_for(kb.load_file("vllm", "attention").logits_soft_cap, given) if given else None,
        v1_fp8_kv_cache=kb.row_for(kb.load_file("vllm", "kv_cache").v1_fp8_kv_cache, version) if version else None,
        quant_speed=quant_speed(),
        architecture=architecture,
        config_types=known_config_types(res.engine_version or "0.18.0"),
        flashinfer_v0_fa2=kb.row_for(kb.load_file("vllm", "attention").flashinfer_v0_profile_fa2, given)
        if given else None,
        bnb_prequant_tp=kb.row_for(kb.load_file("vllm", "quantization").bnb_prequant_tp, version) if version else None,
    )


def quant_speed():
    """Peak tensor-core speed-ups of native FP8/FP4 GEMMs over 16-bit: hardware ratios, not
    engine facts, so one row serves every release."""
    return kb.row_for(kb.load_file("vllm", "quantization").speed, "0.18.0")


# ---- the model registry (architectures.yaml) ----------------------------------------------


def architecture_status(arch: str, version: str) -> tuple[str, str | None]:
    """("native" | "absent" | "unknown", the first release read that has it)."""
    from packaging.version import Version

    data = kb.load_file("vllm", "architectures")
    row = data["architectures"].get(arch)
    v = Version(kb.release_of(version))
    newest_read = Version(data["read"][-1])
    if v < Version(data["read"][0]):
        # older than the first registry read: the release notes' first release, else the old reads
        early = data["early"]["since"].get(arch)
        if early is not None:
            return ("native" if v >= Version(early) else "absent"), early
        return _old_read_status(data.get("early_reads") or {}, arch, v, known_later=row is not None)
    if row is None:
        return ("absent" if v <= newest_read else "unknown"), None
    since = Version(row["since"])
    if retired_in(arch, version):
        return "absent", row["since"]
    if v >= since:
        return "native", row["since"]
    if row.get("absent_in") and v <= Version(row["absent_in"]):
        return "absent", row["since"]
    if not row.get("absent_in"):
        return "absent", row["since"]
    return "unknown", row["since"]


def retired_in(arch: str, version: str) -> tuple[str, str | None] | None:
    """(first release read without it, the engine's "supported until" release) when vLLM
    `version` no longer registers `arch` after having served it; None otherwise."""
    from packaging.version import Version

    row = kb.load_file("vllm", "architectures")["architectures"].get(arch)
    if not row or not row.get("removed_in"):
        return None
    v = Version(kb.release_of(version))
    returned = row.get("returned_in")
    if v < Version(row["removed_in"]) or (returned and v >= Version(returned)):
        return None
    return row["removed_in"], row.get("last_supported")


def _old_read_status(reads: dict, arch: str, v, *, known_later: bool) -> tuple[str, str | None]:
    """Status on a release older than 0.10.0 from the registries read there (early_reads)."""
    from packaging.version import Version

    order = [Version(r) for r in reads.get("read") or ()]
    if not order:
        return ("absent" if not known_later else "unknown"), None
    row = (reads.get("architectures") or {}).get(arch)
    if row is None:
        # in no old registry read: absent up to the newest old read; unknown past it
        return ("absent" if v <= order[-1] else "unknown"), None
    since = Version(row["since"])
    if row.get("removed_in") and v >= Version(row["removed_in"]):
        return "absent", row["since"]
    if v < since:
        if row.get("absent_in") and v <= Version(row["absent_in"]):
            return "absent", row["since"]
        return "unknown", row["since"]  # between two reads, or before the first one
    for gap in row.get("absent_also_in") or ():
        g = Version(gap)
        before = max((r for r in order if r < g), default=None)
        after = min((r for r in order if r > g), default=None)
        if v == g:
            return "absent", row["since"]
        if (before is None or v > before) and (after is None or v < after):
            return "unknown", row["since"]
    return "native", row["since"]


# ---- config classes (config_types.yaml) ----------------------------------------------------


def transformers_config_types() -> frozenset:
    return frozenset(kb.load_file("vllm", "config_types").transformers_configs[0].model_types)


def known_config_types(version: str) -> frozenset:
    row = kb.row_for(kb.load_file("vllm", "config_types").vllm_configs, version)
    return transformers_config_types() | frozenset(row.model_types if row else ())


def fp8_block_moe(version: str):
    """The whole-FP8-blocks-per-rank check of the MoE layers in `version`, as a row, or None."""
    return kb.row_for(kb.load_file("vllm", "quantization").fp8_block_moe, version)


def ct_wna16_kernel(version: str):
    """How `version` runs a compressed-tensors W4A16/W8A16 layer (marlin_only / chooser), as a
    row, or None where the release was not read."""
    return kb.row_for(kb.load_file("vllm", "quantization").ct_wna16_kernel, version)


def fp4_kernel_targets(version: str):
    """The compute capabilities the PyPI wheel's NVFP4 kernels run on in `version`, as a row,
    or None where the build was not read."""
    return kb.row_for(kb.load_file("vllm", "builds").fp4_kernel_targets, version)


def unquantized_moe_trtllm_block(version: str):
    """FlashInfer TRTLLM BF16 MoE taken first for unquantized MoE on SM100, with its block
    size, as a row; None where that is not the default or was not read."""
    return kb.row_for(kb.load_file("vllm", "quantization").unquantized_moe_trtllm_block, version)


def scheduler_budget_below_len(version: str):
    """SchedulerConfig's refusal of a step budget below max_model_len without chunked
    prefill, as a row, or None for releases not read."""
    return kb.row_for(kb.load_file("vllm", "engine").scheduler_budget_below_len, version)


def v1_forces_chunked_prefill(version: str):
    """Whether the V1 engine of this release overwrites --no-enable-chunked-prefill (a row
    with value and pooling_spared), or None for releases not read."""
    return kb.row_for(kb.load_file("vllm", "engine").v1_forces_chunked_prefill, version)


def fp8_marlin_shapes(version: str):
    """FP8 weight-only Marlin's shard tiles in this release (or padding)."""
    return kb.row_for(kb.load_file("vllm", "quantization").fp8_marlin_shapes, version)


def group_alignment(version: str):
    """GPTQ/AWQ kernels' whole-group test, and whether awq_marlin falls back to them."""
    return kb.row_for(kb.load_file("vllm", "quantization").group_alignment, version)


def marlin_moe_fallback(version: str):
    """Whether GPTQ/AWQ experts Marlin cannot tile go to the MoE WNA16 kernels instead."""
    return kb.row_for(kb.load_file("vllm", "quantization").marlin_moe_fallback, version)


def env_backend_names(version: str):
    """The backend names VLLM_ATTENTION_BACKEND may hold in `version`, and the refusal."""
    return kb.row_for(kb.load_file("vllm", "attention").env_backend_names, version)
