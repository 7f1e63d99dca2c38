"""What llama.cpp's server will use: KV cache types for K and V, and whether they can start."""

from __future__ import annotations

import dataclasses

from servepilot.engines import knowledge as kb
from servepilot.engines.resolution import Evidence, Resolution

ENGINE = "llamacpp"


def _row(name: str):
    rows = getattr(kb.load_file(ENGINE, "kv_cache"), name)
    return rows[0]  # llama.cpp build numbers are not PEP 440 versions; one row holds for all


def resolve(dep) -> Resolution:
    opts = dep.launch.options
    ctk = str(opts.get("cache_type_k") or "f16")
    ctv = str(opts.get("cache_type_v") or "f16")
    valid = _row("valid_dtypes")
    values = tuple(valid.values)
    evidence = [Evidence(f"--cache-type-k {ctk}, --cache-type-v {ctv}", valid.source)]
    error = None
    notes = ["llama.cpp has no attention backend choice to resolve; GPU offload (-ngl) is read by the planner"]
    fa = str(opts.get("flash_attn", "")).lower()
    if ctv not in ("f16", "f32", "bf16"):
        source = _row("quantized_v_needs_flash_attn").source
        if fa in ("off", "false", "0", "disabled"):
            error = "V cache quantization requires flash_attn"
            evidence.append(Evidence(f"quantized V cache ({ctv}) with flash attention off", source))
        elif fa == "":
            # the default was "off" in older builds and "auto" in newer ones
            notes.append(f"quantized V cache ({ctv}) needs flash attention; --flash-attn not given, so it depends on "
                         "the build's default")
            evidence.append(Evidence(f"quantized V cache ({ctv}), --flash-attn left to the build default", source))
    ccs = [g.compute_capability for g in dep.cluster.gpus if g.compute_capability]
    spec = dep.spec
    return Resolution(
        engine="llama.cpp", engine_version=dep.engine_version, gpu_cc=min(ccs) if ccs else None,
        kv_cache_dtype=ctk if ctk == ctv else f"k={ctk},v={ctv}", kv_cache_storage=ctk, kv_requested=ctk,
        kv_evidence=tuple(evidence), kv_valid=ctk in values and ctv in values, kv_valid_values=values,
        head_size=spec.attention.head_dim if spec is not None and spec.attention else None,
        selection_error=error, facts=(Evidence("cache types", valid["source"]),),
        notes=tuple(notes), extra={"flash_attn": fa or None, "cache_type_v": ctv},
    )


def resolve_with(dep, *, kv_cache_dtype: str | None = None, engine_version: str | None = None,
                 unset_env: tuple[str, ...] = ()) -> Resolution:
    launch = dep.launch
    if kv_cache_dtype is not None:
        launch = dataclasses.replace(launch,
                                     options={**launch.options, "cache_type_k": kv_cache_dtype,
                                              "cache_type_v": kv_cache_dtype})
    return resolve(dataclasses.replace(dep, launch=launch))


def resolve_with_spec(dep, spec) -> Resolution:
    return resolve(dataclasses.replace(dep, spec=spec))
