"""Remedies for a failing KV cache / attention backend combination, each verified by re-resolving.

A remedy is offered only when the engine's own rules, re-run with the change, no longer fail.
Order (the ranking): explicit --kv-cache-dtype, upgrade, checkpoint overlay without the KV
scheme, --hf-overrides, other hardware.
"""

from __future__ import annotations

import copy
import dataclasses

from servepilot.checks.finding import Remedy
from servepilot.checks.kvmath import dtype_change_tradeoff

UPGRADE_CANDIDATES = ("0.10.1", "0.10.2", "0.11.0", "0.12.0", "0.13.0", "0.14.1", "0.16.0", "0.17.0", "0.18.0")


def kv_remedies(dep, ctx) -> list[Remedy]:
    res = ctx.resolution
    resolver = ctx.resolver
    out: list[Remedy] = []
    storage = res.kv_cache_storage or "fp8_e4m3"
    model_dtype = res.model_dtype or "bfloat16"

    # 1. an explicit 16-bit KV cache
    alt = resolver.resolve_with(dep, kv_cache_dtype=model_dtype)
    if not alt.fails and alt.kv_valid:
        words, numbers = dtype_change_tradeoff(dep, storage, alt.kv_cache_storage or model_dtype, ctx.plan)
        settings = {"kv_cache_dtype": model_dtype}
        shorter = _shorter_max_len(dep, numbers)
        change = f"--kv-cache-dtype {model_dtype}"
        if shorter is not None:
            settings["max_model_len"] = shorter
            change += f" --max-model-len {shorter}"
            words += f"; the model's full context no longer fits in the KV cache, so --max-model-len {shorter:,} too"
        out.append(Remedy(
            kind="flag",
            change=change,
            tradeoff=f"{words}; attention runs on {alt.attention_backend}; the checkpoint's KV scales go unused",
            args={"set": settings, "unset": []},
        ))

    # 2. a release that accepts the same configuration
    upgrade = first_passing_release(dep, resolver, res.engine_version)
    if upgrade is not None:
        version, alt = upgrade
        change = f"pip install 'vllm>={version}'"
        args: dict = {"upgrade": {"package": "vllm", "specifier": f">={version}"}}
        dropped = flags_refused_by(dep, version)
        if dropped:
            # the new release's parser would refuse these before anything else happens
            change += f" and drop {' '.join(dropped)} (gone in {version})"
            args["set"] = {}
            args["unset"] = [flag.lstrip("-").replace("-", "_") for flag in dropped]
        out.append(Remedy(
            kind="upgrade",
            change=change,
            tradeoff=f"keeps the {alt.kv_cache_dtype} KV cache (attention on {alt.attention_backend}); a new engine "
                     "release to install and validate",
            args=args,
        ))

    # 3. an overlay of the checkpoint without the KV scheme (auto then means the model dtype)
    if res.kv_requested == "auto" and res.kv_cache_dtype != "auto":
        shorter_len = None
        overlay = overlay_without_kv(dep)
        if overlay is not None:
            patches, stripped_spec = overlay
            alt = resolver.resolve_with_spec(dep, stripped_spec)
            if not alt.fails:
                words, numbers = dtype_change_tradeoff(dep, storage, alt.kv_cache_storage or model_dtype, ctx.plan)
                shorter = shorter_len = _shorter_max_len(dep, numbers)
                files = ", ".join(f"{name} ({', '.join(op['path'] for op in ops)})" for name, ops in patches.items())
                change = f"serve an overlay of the checkpoint without the KV cache scheme: {files}"
                args: dict = {"overlay": patches}
                if shorter is not None:
                    # the 16-bit cache no longer holds one full-context request: without the
                    # shorter length the overlay would trade one start-up error for another
                    words += (
                        f"; the model's full context no longer fits in the KV cache, so --max-model-len {shorter:,} too"
                    )
                    change += f"; --max-model-len {shorter}"
                    args["set"] = {"max_model_len": shorter}
                    args["unset"] = []
                out.append(Remedy(
                    kind="overlay",
                    change=change,
                    tradeoff=f"{words}; the original checkpoint is untouched (symlinked weights, patched JSON copies)",
                    args=args,
                ))
        hf = hf_overrides_without_kv(dep)
        if hf is not None:
            alt = resolver.resolve_with_spec(dep, _spec_with_config(dep.spec, hf))
            if not alt.fails:
                settings = {"hf_overrides": {"quantization_config": hf}}
                change = _hf_change(hf)
                if shorter_len is not None:
                    settings["max_model_len"] = shorter_len
                    change += f" --max-model-len {shorter_len}"
                out.append(Remedy(
                    kind="flag",
                    change=change,
                    tradeoff=("same effect as the overlay without touching files; a dict value replaces the whole "
                              "quantization_config, so the full dict (without the KV keys) must be given, as here"),
                    args={"set": settings, "unset": []},
                ))

    # 4. other GPUs whose backends take this KV dtype
    for cc, name in (((9, 0), "H100/H200 (SM90)"), ((10, 0), "B200/GB200 (SM100)")):
        if res.gpu_cc and res.gpu_cc[0] == cc[0]:
            continue
        alt = resolver.resolve(_dep_with_cc(dep, cc))
        if not alt.fails and alt.attention_backend:
            out.append(Remedy(
                kind="hardware",
                change=f"run on {name} GPUs",
                tradeoff=f"there the same command resolves {alt.attention_backend} with {alt.kv_cache_dtype}; "
                         "different hardware",
                args={"hardware": {"compute_capability": f"{cc[0]}.{cc[1]}"}},
            ))
            break
    return out


def _shorter_max_len(dep, numbers: dict) -> int | None:
    """A --max-model-len that fits the smaller KV cache, when the current one no longer does.

    vLLM refuses to start when one sequence of max_model_len does not fit in the KV cache
    (vllm/v1/core/kv_cache_utils.py@v0.16.0 check_enough_kv_cache_memory); rounded down to
    a multiple of 1,024 tokens.
    """
    from servepilot.checks.rules.model import derived_max_len

    after = numbers.get("kv_tokens_after")
    if after is None or dep.spec is None:
        return None
    want = dep.launch.get("max_model_len")
    try:
        want = int(want) if want not in (None, "auto", -1) else derived_max_len(dep.spec)[0]
    except (TypeError, ValueError):
        return None
    if want is None or after >= want:
        return None
    return max(1024, after // 1024 * 1024)


def flags_refused_by(dep, version: str) -> list[str]:
    """Flags of the command that `version`'s argument parser does not have."""
    from servepilot.engines.cmdline import parse_argv
    from servepilot.errors import BadInput

    try:
        again = parse_argv(list(dep.launch.argv), dep.launch.shell, engine_version=version)
    except BadInput:
        return []
    return [flag for flag in again.unknown_flags if any(f" {flag} flag" in r for r in again.rejected)]


def first_passing_release(dep, resolver, current: str | None):
    """The oldest read release newer than `current` under which the same command resolves."""
    from packaging.version import Version

    from servepilot.engines import knowledge as kb

    if current is None:
        return None
    now = Version(kb.release_of(current))
    for version in UPGRADE_CANDIDATES:
        if Version(version) <= now:
            continue
        alt = resolver.resolve_with(dep, engine_version=version)
        if not alt.fails and alt.attention_backend:
            return version, alt
    return None


def overlay_without_kv(dep):
    """RFC 6902 patches removing the KV scheme from every quant declaration, and the patched spec."""
    spec = dep.spec
    if spec is None:
        return None
    patches: dict[str, list[dict]] = {}
    ops = _kv_removals((spec.config or {}).get("quantization_config"), "/quantization_config")
    if ops:
        patches["config.json"] = ops
    new_decls = []
    for decl in (spec.quant.declarations if spec.quant else ()):
        raw = decl.raw
        if decl.where == "hf_quant_config.json":
            ops = _kv_removals(raw, "")
            if ops:
                patches["hf_quant_config.json"] = ops
                raw = _apply_removals(raw, ops)
        new_decls.append(dataclasses.replace(decl, raw=raw, kv_cache=None))
    if not patches:
        return None
    config = _apply_removals(spec.config or {}, patches.get("config.json", []))
    quant = dataclasses.replace(spec.quant, declarations=tuple(new_decls)) if spec.quant else None
    return patches, dataclasses.replace(spec, config=config, quant=quant, kv_cache=None)


def hf_overrides_without_kv(dep) -> dict | None:
    """The full quantization_config the engine reads, minus its KV keys (for --hf-overrides)."""
    spec = dep.spec
    qc = (spec.config or {}).get("quantization_config") if spec else None
    if not isinstance(qc, dict):
        for decl in (spec.quant.declarations if spec and spec.quant else ()):
            if decl.where == "hf_quant_config.json" and isinstance(decl.raw, dict):
                qc = decl.raw
                break
    if not isinstance(qc, dict):
        return None
    return _apply_removals(qc, _kv_removals(qc, ""))


# The keys by which a ModelOpt export asks for a quantized KV cache: at the top of its quant
# config (config.json quantization_config) or under "quantization" (hf_quant_config.json).
KV_KEYS = ("kv_cache_scheme", "kv_cache_quant_algo")


def _kv_removals(quant_config, prefix: str) -> list[dict]:
    """RFC 6902 remove ops for every KV key of `quant_config`, whose JSON pointer is `prefix`."""
    if not isinstance(quant_config, dict):
        return []
    ops = [{"op": "remove", "path": f"{prefix}/{k}"} for k in KV_KEYS if k in quant_config]
    inner = quant_config.get("quantization")
    if isinstance(inner, dict):
        ops += [{"op": "remove", "path": f"{prefix}/quantization/{k}"} for k in KV_KEYS if k in inner]
    return ops


def _spec_with_config(spec, quant_config: dict):
    config = dict(spec.config or {})
    config["quantization_config"] = quant_config
    return dataclasses.replace(spec, config=config)


def _apply_removals(doc: dict, ops: list[dict]) -> dict:
    import jsonpatch

    return jsonpatch.apply_patch(doc, ops) if ops else copy.deepcopy(doc)


def _dep_with_cc(dep, cc):
    gpus = tuple(dataclasses.replace(g, compute_capability=cc) for g in dep.cluster.gpus)
    return dataclasses.replace(dep, cluster=dataclasses.replace(dep.cluster, gpus=gpus))


def _hf_change(hf: dict) -> str:
    """The flag as typed; long dicts (ignore lists of hundreds of modules) are shortened for reading."""
    text = "--hf-overrides '" + _json({"quantization_config": hf}) + "'"
    if len(text) <= 240:
        return text
    return (
        f"--hf-overrides '{{\"quantization_config\": {{...the checkpoint's {len(hf)} keys, "
        "without kv_cache_scheme / kv_cache_quant_algo...}}' (full value in args)"
    )


def _json(value) -> str:
    import json

    return json.dumps(value, separators=(",", ":"))
