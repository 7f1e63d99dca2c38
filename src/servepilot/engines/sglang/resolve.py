"""What SGLang will pick for a Deployment: KV cache dtype, attention backend, page size,
quantization kernels and its memory defaults.

The attention backend follows engines/sglang/attention.py (knowledge/attention.yaml) for the
release lines read; for others the Resolution says the choice is not modelled.
"""

from __future__ import annotations

import dataclasses

from servepilot.engines import knowledge as kb
from servepilot.engines.resolution import Candidate, Evidence, QuantKernels, Resolution
from servepilot.engines.sglang import attention

ENGINE = "sglang"
DEFAULT_VERSION = "0.5.10"


def resolve(dep) -> Resolution:
    notes = []
    version = dep.engine_version or DEFAULT_VERSION
    kb.parse_version(version)
    read = kb.load_file(ENGINE, "engine").read_releases
    if kb.release_of(version) not in read:
        notes.append(f"SGLang {version} itself was not read (read: {', '.join(read)}); facts whose ranges cover it are "
                     "used, others are unknown")
    opts = dep.launch.options
    spec = dep.spec
    ccs = [g.compute_capability for g in dep.cluster.gpus if g.compute_capability]
    cc = min(ccs) if ccs else None
    requested = str(opts.get("kv_cache_dtype") or "auto")
    row = kb.row_for(kb.load_file(ENGINE, "kv_cache").valid_dtypes, version)
    valid_values = tuple(row.values) if row else ()
    if row is None:
        notes.append(f"valid --kv-cache-dtype values of SGLang {version} are unknown to servepilot")
    model_dtype = ((spec.dtype if spec is not None and spec.dtype != "float32" else "bfloat16")
                   if spec is not None else None)
    if opts.get("dtype") not in (None, "auto"):
        model_dtype = {"half": "float16"}.get(opts["dtype"], opts["dtype"])
    if requested in ("bf16", "bfloat16"):
        requested_storage = "bfloat16"
    else:
        requested_storage = model_dtype if requested == "auto" else requested
    evidence = (Evidence(f"--kv-cache-dtype {requested}" + (": the model dtype" if requested == "auto" else ""),
                         row.source if row else "sglang/srt/server_args.py"),)
    use_mla = bool(spec is not None and spec.is_mla)
    head = None
    if spec is not None and spec.attention is not None:
        head = spec.attention.mla_head_size if use_mla else spec.attention.head_dim
    choice = None
    if cc is not None:
        choice = attention.choose(
            version,
            cc,
            use_mla=use_mla,
            arch=_arch(spec),
            sparse=bool(spec is not None and spec.attention is not None and spec.attention.sparse),
            kv_cache_dtype=requested,
            backend=opts.get("attention_backend"),
            page_size=_int(opts.get("page_size")),
            asymmetric_kv=_asymmetric_kv(spec, use_mla),
        )
    if choice is None:
        why = " (GPU compute capability unknown)" if cc is None else \
            f" for {_arch(spec)} (model-specific rules)" if cc is not None and attention.modelled(version) else ""
        notes.append(f"SGLang {version}'s attention backend choice is not modelled by servepilot{why}")
    extra = {}
    facts = ()
    if choice is not None:
        notes.extend(choice.notes)
        what = f"attention backend {choice.backend}, page size {choice.page_size}" if choice.backend \
            else f"SGLang refuses ({choice.stage}): {choice.error}"
        facts = (Evidence(what, choice.source),)
        extra = {"attention_stage": choice.stage, "attention_category": choice.category}
    if choice is not None and (opts.get("prefill_attention_backend") or opts.get("decode_attention_backend")):
        notes.append("--prefill/--decode-attention-backend are not modelled: the backend shown is "
                     "--attention-backend's")
    from servepilot.engines.sglang import quant

    fp8_path = quant.fp8_below_native(dep, version, cc)
    if fp8_path is not None:
        notes.extend(fp8_path.notes)
    return Resolution(
        engine=ENGINE, engine_version=version, gpu_cc=cc,
        attention_backend=choice.backend if choice else None,
        forced_backend=opts.get("attention_backend") if choice else None,
        forced_by=choice.forced_by if choice else None,
        selection_error=choice.error if choice else None,
        block_size=choice.page_size if choice else None,
        candidates=(Candidate(opts.get("attention_backend") or "SGLang's default", (choice.error,)),)
        if choice is not None and choice.error else (),
        extra=extra,
        kv_cache_dtype=requested, kv_cache_storage=requested_storage,
        kv_requested=requested, kv_evidence=evidence, kv_valid=not valid_values or requested in valid_values,
        kv_valid_values=valid_values, use_mla=use_mla, head_size=head, model_dtype=model_dtype,
        quant=_quant(dep, version, cc),
        facts=((Evidence("valid --kv-cache-dtype values", row.source),) if row else ()) + facts,
        notes=tuple(notes),
    )


def _arch(spec) -> str | None:
    if spec is None:
        return None
    archs = (spec.config or {}).get("architectures") or []
    return archs[0] if archs else None


def _asymmetric_kv(spec, use_mla: bool) -> bool:
    """An MHA model whose V rows are narrower or wider than its K rows (config v_head_dim)."""
    att = spec.attention if spec is not None else None
    if use_mla or att is None or not att.v_head_dim:
        return False
    return att.v_head_dim != att.head_dim


def _int(value) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def resolve_with(dep, *, kv_cache_dtype: str | None = None, engine_version: str | None = None,
                 unset_env: tuple[str, ...] = ()) -> Resolution:
    launch = dep.launch
    if kv_cache_dtype is not None:
        launch = dataclasses.replace(launch, options={**launch.options, "kv_cache_dtype": kv_cache_dtype})
    if engine_version is not None:
        launch = dataclasses.replace(launch, engine_version=engine_version)
    return resolve(dataclasses.replace(dep, launch=launch))


def resolve_with_spec(dep, spec) -> Resolution:
    return resolve(dataclasses.replace(dep, spec=spec))


def _quant(dep, version, cc) -> QuantKernels | None:
    from servepilot.engines.sglang import quant

    method = quant.method_of(dep)
    if not method:
        return None
    row = quant.method_row(method, version)
    if row is None:
        return QuantKernels(method=method)
    if cc is None:
        return QuantKernels(method=method, min_cc=row.min_cc, native_min_cc=row.native_min_cc,
                            source=row.source)
    value = cc[0] * 10 + cc[1]
    if value < row.min_cc:
        return QuantKernels(method=method, min_cc=row.min_cc, native_min_cc=row.native_min_cc,
                            supported=False, source=row.source,
                            error=f"The quantization method {row.engine_name or method} is not "
                                  "supported for the current GPU. Minimum capability: "
                                  f"{row['min_cc']}. Current capability: {value}.")
    path = quant.fp8_below_native(dep, version, cc)
    if path is not None:
        # FP8 below 8.9: Marlin W8A16 for the linear layers only when the release turns it on;
        # FP8 experts and non-Marlin linear layers are Triton kernels (checks/rules/sglang_quant.py)
        marlin = path.linear == "marlin" and path.refusal is None
        linear = "Marlin W8A16 (weight-only FP8)" if path.linear == "marlin" else path.linear
        return QuantKernels(method=method, min_cc=row.min_cc, native_min_cc=row.native_min_cc,
                            linear=linear,
                            moe=f"Triton fused MoE (FP8 W8A8): {path.refusal}" if path.moe
                            else None,
                            fallback=marlin, source=path.source)
    fallback = value < row.native_min_cc and bool(row.fallback)
    return QuantKernels(method=method, min_cc=row.min_cc, native_min_cc=row.native_min_cc,
                        linear=row.fallback if fallback else "native",
                        fallback=fallback, source=row.source)
