"""What vLLM will pick for a Deployment: KV cache dtype, attention backend, block size, quant kernels.

Mirrors the engine's own order of decisions (vllm/engine/arg_utils.py create_engine_config,
then vllm/platforms/cuda.py), reading every version-dependent fact from knowledge/*.yaml.
"""

from __future__ import annotations

import dataclasses

from servepilot.engines import knowledge as kb
from servepilot.engines.resolution import Candidate, Evidence, QuantKernels, Resolution

ENGINE = "vllm"
# The release whose facts are used when no version is given or installed: the newest one
# whose sdist was read end to end. A note says so.
DEFAULT_VERSION = "0.18.0"


def resolve(dep) -> Resolution:
    """Resolve `dep` (a Deployment) as vLLM at `dep.engine_version` would on its first GPU."""
    notes: list[str] = []
    version = dep.engine_version
    if not version:
        version = DEFAULT_VERSION
        notes.append(f"no vLLM version given or installed; facts of vLLM {DEFAULT_VERSION} used (pass "
                     "--engine-version)")
    else:
        kb.parse_version(version)  # BadInput for nonsense
        if not kb.is_known_version(ENGINE, version):
            oldest, newest = kb.known_range(ENGINE)
            notes.append(f"vLLM {version} is outside the releases servepilot has read ({oldest} to {newest}); the "
                         "nearest facts are used")
        elif kb.release_of(version) not in kb.load_file(ENGINE, "engine").read_releases:
            notes.append(f"vLLM {kb.release_of(version)} itself was not read; facts of the releases around it are used")
    given = version  # as asked: rows older than the oldest read release are looked up with it first
    version = _clamp(version)

    spec = dep.spec
    opts = dep.launch.options
    env = dict(dep.launch.shell.env or {})
    cc = _gpu_cc(dep)
    if cc is None and dep.cluster.gpus and dep.cluster.platform != "cuda":
        notes.append("not NVIDIA GPUs (no compute capability): vLLM's CUDA attention backend "
                     "and kernel selection does not apply")
    elif cc is None:
        notes.append("the GPU's compute capability is unknown (no GPU probed and no --gpu): attention backend and "
                     "kernels not resolved")
    facts: list[Evidence] = []

    model_dtype = _model_dtype(spec, opts, cc)
    use_mla = bool(spec is not None and spec.is_mla) and env.get("VLLM_MLA_DISABLE", "0") in ("", "0")
    use_sparse = bool(use_mla and spec.attention.sparse)
    has_sink = _has_sink(spec, version)
    head_size = _head_size(spec, use_mla)

    kv = resolve_kv_cache_dtype(dep, version, use_mla=use_mla, use_sparse=use_sparse, model_dtype=model_dtype)
    facts.extend(kv["facts"])

    quant = resolve_quant(dep, version, cc, given=given)
    if quant is not None and quant.source:
        facts.append(Evidence(f"quantization {quant.method}: min capability {quant.min_cc}", quant.source))

    base = Resolution(
        engine=ENGINE,
        engine_version=version,
        gpu_cc=cc,
        kv_cache_dtype=kv["resolved"],
        kv_cache_storage=_storage(kv["resolved"], model_dtype),
        kv_requested=kv["requested"],
        kv_evidence=tuple(kv["evidence"]),
        kv_valid=kv["valid"],
        kv_valid_values=tuple(kv["valid_values"]),
        use_mla=use_mla,
        use_sparse=use_sparse,
        has_sink=has_sink,
        head_size=head_size,
        model_dtype=model_dtype,
        quant=quant,
        non_mla_kv_forced=kv["non_mla_forced"],
        notes=tuple(notes),
        extra={"config_error": kv["config_error"]} if kv.get("config_error") else {},
    )
    if spec is None or spec.attention is None or cc is None or not kv["valid"]:
        if spec is None or spec.attention is None:
            base = dataclasses.replace(base, notes=base.notes + ("the model's attention geometry is unknown: attention "
                                                                 "backend not resolved",))
        return dataclasses.replace(base, facts=tuple(facts))

    selection = _select_backend(dep, version, cc, base)
    facts.extend(selection.pop("facts"))
    extra_notes = selection.pop("notes_extra", ())
    extra = dict(base.extra)
    if selection.get("environment_decides"):
        extra["environment_decides"] = selection.pop("environment_decides")
    selection.pop("environment_decides", None)
    resolved = dataclasses.replace(base, facts=tuple(facts), notes=base.notes + tuple(extra_notes), extra=extra,
                                   **selection)
    return _sparse_kv_after_selection(resolved, version) if use_sparse else resolved


def _sparse_kv_after_selection(res: Resolution, version: str) -> Resolution:
    """0.18+: MLAAttention converts the KV dtype for the sparse backend it was given."""
    row = kb.row_for(kb.load_file(ENGINE, "kv_cache").sparse_mla_dtype_map, version)
    if row is None or res.attention_backend is None:
        return res
    kv = str(res.kv_cache_dtype)
    for rule in row.after_selection:
        if rule["backend"] != res.attention_backend:
            continue
        matches = kv.startswith("fp8") if rule["from"] == "fp8*" else kv in rule["from"]
        if matches and kv != rule["to"]:
            fact = Evidence(f"{res.attention_backend} was chosen for sparse MLA: "
                            f"its layer converts {kv} -> {rule['to']}",
                            row.source)
            return dataclasses.replace(res, kv_cache_dtype=rule["to"],
                                       kv_cache_storage=_storage(rule["to"], res.model_dtype),
                                       kv_evidence=res.kv_evidence + (fact,), facts=res.facts + (fact,))
    return res


def resolve_with(dep, *, kv_cache_dtype: str | None = None, engine_version: str | None = None,
                 unset_env: tuple[str, ...] = ()) -> Resolution:
    """Resolve `dep` with one thing changed: how a remedy is evaluated before it is offered."""
    launch = dep.launch
    if kv_cache_dtype is not None:
        options = dict(launch.options)
        options["kv_cache_dtype"] = kv_cache_dtype
        launch = dataclasses.replace(launch, options=options, explicit=frozenset(launch.explicit) | {"kv_cache_dtype"})
    if engine_version is not None:
        launch = dataclasses.replace(launch, engine_version=engine_version)
    if unset_env:
        env = {k: v for k, v in (launch.shell.env or {}).items() if k not in unset_env}
        launch = dataclasses.replace(launch, shell=dataclasses.replace(launch.shell, env=env))
    return resolve(dataclasses.replace(dep, launch=launch))


def resolve_with_spec(dep, spec) -> Resolution:
    """Resolve `dep` against another model spec (an overlay of the same checkpoint)."""
    return resolve(dataclasses.replace(dep, spec=spec))


# --- KV cache dtype ------------------------------------------------------------------------


def effective_quant_config(dep, version: str) -> tuple[dict | None, str | None]:
    """The quantization config dict vLLM reads, and where it came from.

    config.json quantization_config; hf_quant_config.json only when config.json has none;
    an --hf-overrides dict with quantization_config replaces it whole.
    """
    spec = dep.spec
    overrides = _hf_overrides(dep.launch.options)
    if isinstance(overrides.get("quantization_config"), dict):
        return dict(overrides["quantization_config"]), "--hf-overrides quantization_config"
    if spec is None:
        return None, None
    qc = (spec.config or {}).get("quantization_config")
    if isinstance(qc, dict):
        return qc, "config.json:quantization_config"
    if spec.quant is not None:
        for decl in spec.quant.declarations:
            if decl.where == "hf_quant_config.json" and isinstance(decl.raw, dict):
                return decl.raw, "hf_quant_config.json"
    return None, None


def _quant_method_of(cfg: dict) -> str:
    """vLLM's normalisation: a modelopt producer sets quant_method from quant_algo."""
    producer = cfg.get("producer") or {}
    if isinstance(producer, dict) and producer.get("name") == "modelopt" and "quant_method" not in cfg:
        algo = str((cfg.get("quantization") or {}).get("quant_algo", "")).upper()
        if algo == "NVFP4":
            return "modelopt_fp4"
        if algo.startswith("FP8"):
            return "modelopt"
    return str(cfg.get("quant_method", "")).lower().replace("compressed_tensors", "compressed-tensors")


def resolve_kv_cache_dtype(dep, version: str, *, use_mla: bool, use_sparse: bool,
                           model_dtype: str | None = None) -> dict:
    """The KV cache dtype string vLLM will use, with the evidence of how it was derived."""
    opts = dep.launch.options
    requested = str(opts.get("kv_cache_dtype") or "auto")
    evidence: list[Evidence] = []
    facts: list[Evidence] = []
    valid_row = kb.row_for(kb.load_file(ENGINE, "kv_cache").valid_dtypes, version)
    valid_values = list(valid_row.values) if valid_row else []
    out = {"requested": requested, "resolved": requested, "evidence": evidence, "facts": facts,
           "valid": True, "valid_values": valid_values, "non_mla_forced": None}
    if valid_row is not None:
        facts.append(Evidence(f"valid --kv-cache-dtype values: {', '.join(valid_values)}", valid_row.source))
        if requested not in valid_values:
            out["valid"] = False
            evidence.append(Evidence(f"--kv-cache-dtype {requested} is not one of {', '.join(valid_values)}",
                                     valid_row.source))
            return out

    cfg, cfg_where = effective_quant_config(dep, version)
    method = _quant_method_of(cfg) if cfg else ""
    resolved = requested
    if requested == "auto":
        rule = kb.row_for(kb.load_file(ENGINE, "kv_cache").modelopt_auto, version)
        if cfg and method.startswith("modelopt") and rule is not None:
            algo, key = _modelopt_kv_value(cfg)
            if algo is None:
                evidence.append(Evidence(f"{cfg_where} declares no KV cache scheme: auto = model dtype", rule.source))
            elif not rule.follows_checkpoint:
                evidence.append(Evidence(f"{cfg_where} {key} = {algo!r}, but vLLM {version} does not follow it: "
                                         "auto = model dtype",
                                         rule.source))
            else:
                resolved = _map_modelopt_kv(algo, rule)
                evidence.append(Evidence(f"--kv-cache-dtype auto follows the ModelOpt checkpoint: "
                                         f"{cfg_where} {key} = {_short(algo)} -> {resolved}", rule.source))
                if cfg_where == "hf_quant_config.json":
                    src = kb.row_for(kb.load_file(ENGINE, "kv_cache").quant_config_source, version)
                    evidence.append(Evidence("config.json has no quantization_config, "
                                             "so vLLM reads hf_quant_config.json",
                                             src.source if src else ""))
        else:
            evidence.append(Evidence("--kv-cache-dtype auto: the cache uses the model dtype",
                                     "vllm/utils/torch_utils.py@v0.16.0 (kv_cache_dtype_str_to_dtype)"))
    else:
        evidence.append(Evidence(f"--kv-cache-dtype {requested} given explicitly: it wins over the checkpoint",
                                 "vllm/utils/torch_utils.py@v0.16.0 (resolve_kv_cache_dtype_string returns a non-auto "
                                 "value unchanged)"))

    if use_sparse:
        row = kb.row_for(kb.load_file(ENGINE, "kv_cache").sparse_mla_dtype_map, version)
        if row is not None:
            before = resolved
            if resolved.startswith("fp8") and row.fp8_to:
                resolved = row.fp8_to
            elif resolved == "bfloat16":
                resolved = row.bfloat16_to
            if before != resolved:
                evidence.append(Evidence(f"sparse MLA (DeepSeek-V3.2 style) maps {before} -> {resolved}", row.source))

    if cfg and method == "compressed-tensors" and cfg.get("kv_cache_scheme") and not use_mla:
        row = kb.row_for(kb.load_file(ENGINE, "kv_cache").compressed_tensors_forces_fp8, version)
        if row is not None and ((requested == "auto" and row.forces_on_auto)
                                or (requested != "auto" and row.forces_over_explicit)):
            out["non_mla_forced"] = "fp8"
            evidence.append(Evidence(f"compressed-tensors kv_cache_scheme in {cfg_where}: attention layers use fp8 "
                                     "whatever --kv-cache-dtype says", row.source))
            resolved = "fp8"
    out["resolved"] = resolved
    _reject_mismatched_float_kv(out, version, model_dtype)
    return out


def _reject_mismatched_float_kv(out: dict, version: str, model_dtype: str | None) -> None:
    """0.34+: VllmConfig refuses a 16-bit KV dtype other than the model's (after the model's
    own verify hook has had its say: DeepSeek-V3.2 turns bfloat16 into auto first)."""
    row = kb.row_for(kb.load_file(ENGINE, "kv_cache").get("float_kv_must_match_dtype", []), version)
    kv = out["resolved"]
    if row is None or kv not in row["values"] or model_dtype is None or model_dtype == kv:
        return
    allowed = f"`auto` or `{model_dtype}`" if model_dtype in row["values"] else "`auto`"
    message = (f'ValueError: kv_cache_dtype="{kv}" is incompatible with dtype="{model_dtype}". '
               f"Please set `--kv-cache-dtype` to {allowed}.")
    out["valid"] = False
    out["config_error"] = message
    out["evidence"].append(Evidence(f"vLLM {version} refuses --kv-cache-dtype {kv} with a {model_dtype} model",
                                    row.source))


def _modelopt_kv_value(cfg: dict):
    """The first non-empty of the four places vLLM looks, in its order."""
    inner = cfg.get("quantization") if isinstance(cfg.get("quantization"), dict) else cfg
    for value, key in (
        (inner.get("kv_cache_scheme"), "kv_cache_scheme"),
        (cfg.get("kv_cache_scheme"), "kv_cache_scheme"),
        (inner.get("kv_cache_quant_algo"), "kv_cache_quant_algo"),
        (cfg.get("kv_cache_quant_algo"), "kv_cache_quant_algo"),
    ):
        if value:
            return value, key
    return None, None


def _map_modelopt_kv(algo, rule) -> str:
    if isinstance(algo, dict):
        for d in rule.dict_rules:
            if (algo.get("dynamic") is d["dynamic"] and algo.get("num_bits") == d["num_bits"]
                    and algo.get("type") == d["type"]):
                algo = d["gives"]
                break
        else:
            return "auto"  # the engine warns "Unknown kv_cache_quant_algo" and falls back
    if isinstance(algo, str):
        return rule.string_map.get(algo.lower(), "auto")
    return "auto"


def _short(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return repr(value)


# --- attention backend ----------------------------------------------------------------------


def _select_backend(dep, version: str, cc: tuple[int, int], res: Resolution) -> dict:
    attention = kb.load_file(ENGINE, "attention")
    mode_row = kb.row_for(attention.selection, version)
    prio_row = kb.row_for(attention.priorities, version)
    block_row = kb.row_for(attention.block_size, version)
    facts = [Evidence(f"selection mode {mode_row['mode']}",
                      mode_row.source), Evidence("backend priority order", prio_row.source)]
    spec = dep.spec
    qk_nope = spec.attention.qk_nope_head_dim if spec.attention else None
    family = cc[0] * 10
    forced, forced_by = _forced_backend(dep, version)

    given_block = dep.launch.options.get("block_size")
    if block_row.from_backend:
        # 0.18+: the chosen backend's preferred size, unless --block-size was given
        block_size = int(given_block) if given_block is not None else None
        if block_size is not None:
            facts.append(Evidence(f"KV cache block size {block_size} (--block-size: kept and validated)",
                                  block_row.source))
    else:
        block_size, forced, forced_by = _forced_mla_block_size(block_row, res, family, qk_nope, given_block, forced,
                                                               forced_by)
        facts.append(Evidence(f"KV cache block size {block_size}", block_row.source))

    order = _priority_list(prio_row, res, cc)
    backends = attention.backends
    ctx = {
        "head_size": res.head_size, "dtype": res.model_dtype, "kv": res.kv_cache_dtype,
        "block_size": block_size if mode_row.validates_block_size in (True, "when_given") else None,
        "use_mla": res.use_mla, "sink": res.has_sink, "sparse": res.use_sparse, "cc": cc,
        "qk_nope_head_dim": qk_nope, "trtllm_cubins": trtllm_cubins(dep, version),
        "sliding_window": _sliding_window(dep.spec),
        "env": dict(dep.launch.shell.env or {}),
        "trtllm_off": _trtllm_switched_off(dep, version),
        "dcp": _int_option(dep.launch.options.get("decode_context_parallel_size")) or 1,
    }
    out = {"selection_mode": mode_row.mode, "block_size": block_size, "forced_backend": forced, "forced_by": forced_by,
           "facts": facts}

    if mode_row.mode == "legacy":
        return _note_legacy_sinks_host(out | _legacy_select(backends, order, ctx, version, forced),
                                       backends, ctx, version)
    if block_size is None:
        out = _with_backend_block_size(_validated_select(out, backends, order, ctx, version, forced,
                                                         res), block_row, backends, version)
    else:
        out = _validated_select(out, backends, order, ctx, version, forced, res)
    return _note_environment_decides(out, backends, order, ctx, version, forced, res)


def trtllm_cubins(dep, version: str | None = None) -> bool | None:
    """Whether FlashInfer's TRTLLM/XQA cubins are available where vLLM runs: True with
    VLLM_HAS_FLASHINFER_CUBIN=1 in the command or for releases whose wheel depends on
    flashinfer-cubin, False when the deployment says NVIDIA's artifactory is unreachable,
    None when unknown (vllm/utils/flashinfer.py has_nvidia_artifactory answers at start-up,
    over the network)."""
    env = dep.launch.shell.env or {}
    if str(env.get("VLLM_HAS_FLASHINFER_CUBIN", "0")).strip() not in ("", "0"):
        return True
    row = kb.row_for(kb.load_file(ENGINE,
                                  "attention").get("flashinfer_cubin_dependency", []), version) if version else None
    if row is not None and row["wheel_requires_flashinfer_cubin"]:
        return True
    return dep.extra.get("nvidia_artifactory") if isinstance(dep.extra, dict) else None


def _note_environment_decides(out: dict, backends, order, ctx, version: str, forced, res: Resolution) -> dict:
    """A backend chosen for attention sinks only because cubins are assumed reachable: name
    what vLLM picks on a host without them."""
    chosen = out.get("attention_backend")
    row = kb.row_for(backends.get(chosen, []), version) if chosen else None
    if not (row and ctx["sink"] and row.get("sinks_need_trtllm_cubins") and ctx["trtllm_cubins"] is None):
        return out
    offline = _validated_select({"facts": []}, backends, order, dict(ctx, trtllm_cubins=False), version, forced, res)
    instead = offline.get("attention_backend") or "no valid backend"
    note = (f"the environment decides: {chosen} takes the model's attention sinks only with FlashInfer's "
            f"TRTLLM cubins, downloaded from NVIDIA's artifactory at start-up or installed with "
            f"flashinfer-cubin (VLLM_HAS_FLASHINFER_CUBIN=1); on a host with neither, vLLM {version} "
            f"picks {instead} (check --ask-engine asks the engine on this host)")
    out["facts"].append(Evidence(note, row.source))
    out["environment_decides"] = {"backend": chosen, "without_cubins": offline.get("attention_backend"),
                                  "fact": note, "source": row.source}
    return out


def _forced_mla_block_size(block_row, res: Resolution, family: int, qk_nope, given_block, forced, forced_by):
    """0.10-0.17: check_and_update_config's MLA block size (and, 0.16-0.17, its SM100 forcing)."""
    block_size, forced, forced_by = _mla_block_size(block_row, res, family, qk_nope, given_block, forced, forced_by)
    sparse_block = block_row.get("sparse_mla_block")
    kept = (block_row.get("sparse_mla_block_kept") or {}).get(forced) or ()
    if res.use_sparse and sparse_block and not (given_block is not None and int(given_block) in kept):
        # sparse MLA (index_topk): the same branch then sets its size on every GPU, given or not
        block_size = int(sparse_block)
    return block_size, forced, forced_by


def _mla_block_size(block_row, res: Resolution, family: int, qk_nope, given_block, forced, forced_by):
    adjusts_given = block_row.get("given_block_adjusted", False)
    if given_block is not None and not adjusts_given:
        return int(given_block), forced, forced_by
    block_size = block_row.default
    if res.use_mla and not forced:
        if family == 90 and block_row.mla_hopper:
            block_size = block_row.mla_hopper
        elif family == 100 and not res.use_sparse:
            if block_row.sm100_forces_flashinfer_mla and qk_nope == 128:
                block_size = block_row.mla_family_100_flashinfer
                forced, forced_by = "FLASHINFER_MLA", "vLLM's SM100 default (check_and_update_config)"
            else:
                block_size = block_row.mla_family_100
    elif res.use_mla and forced:
        # a forced MLA backend gets its own block size (check_and_update_config)
        block_size = {"FLASHMLA": block_row.mla_hopper, "CUTLASS_MLA": block_row.mla_family_100,
                      "FLASHINFER_MLA": block_row.mla_family_100_flashinfer or block_size}.get(forced, block_size)
    if given_block is not None:
        # keep the operator's size when the forced MLA kernel takes it (a multiple; 32 for FlashInfer MLA)
        given = int(given_block)
        takes_given = (block_size == block_row.default or given % block_size == 0
                       or (forced == "FLASHINFER_MLA" and given == 32))
        return (given if takes_given else int(block_size)), forced, forced_by
    return int(block_size), forced, forced_by


def _with_backend_block_size(out: dict, block_row, backends, version: str) -> dict:
    """0.18+ without --block-size: update_block_size_for_backend asks the chosen backend."""
    chosen = out.get("attention_backend")
    row = kb.row_for(backends.get(chosen, []), version) if chosen else None
    if row is None:
        out["block_size"] = int(block_row.default)
        why = (f"no backend chosen: the default {block_row['default']}" if chosen is None
               else f"no facts for {chosen}: the default {block_row['default']}")
        out["facts"].append(Evidence(f"KV cache block size {block_row['default']} ({why})", block_row.source))
        return out
    out["block_size"] = preferred_block_size(row.block_sizes or [], int(block_row.default))
    out["facts"].append(Evidence(f"KV cache block size {out['block_size']}: {chosen}'s preferred size "
                                 f"(default {block_row['default']})", block_row.source))
    return out


def preferred_block_size(sizes: list, default: int) -> int:
    """Backend.get_preferred_block_size: the default when the kernels take it, else their smallest."""
    if not sizes or _block_ok(sizes, default):
        return default
    return min(s["multiple_of"] if isinstance(s, dict) else s for s in sizes)


def _validated_select(out: dict, backends, order, ctx, version: str, forced, res: Resolution) -> dict:
    facts = out["facts"]

    if forced:
        row = kb.row_for(backends.get(forced, []), version)
        if row is None:
            # not a backend servepilot has facts for (ROCm, tree attention, a newer one...):
            # say so instead of guessing whether the engine accepts it
            out["attention_backend"] = forced
            out["notes_extra"] = (f"servepilot has no facts for attention backend {forced} in vLLM {version}: not "
                                  "validated",)
            return out
        reasons = validate(row, ctx)
        out["candidates"] = (Candidate(forced, tuple(reasons)),)
        if reasons:
            out["selection_error"] = (f"ValueError: Selected backend AttentionBackendEnum.{forced} "
                                    f"is not valid for this configuration. Reason: {reasons}")
        else:
            out["attention_backend"] = forced
            out["selection_error"] = _impl_error(row, ctx)
        return out

    candidates = []
    for name in order:
        row = kb.row_for(backends.get(name, []), version)
        if row is None:
            continue
        facts.append(Evidence(f"{name}: kv dtypes {row.get('kv_cache_dtypes')}, "
                              f"compute capability {row.get('compute_capability')}", row.source))
        candidates.append(Candidate(name, tuple(validate(row, ctx))))
    out["candidates"] = tuple(candidates)
    valid = [c for c in candidates if c.valid]
    if not valid:
        reasons = ", ".join(f"{c.backend}: [{', '.join(c.reasons)}]" for c in candidates)
        out["selection_error"] = (
            f"ValueError: No valid attention backend found for cuda with head_size={res.head_size}, "
            f"dtype={res.model_dtype}, kv_cache_dtype={res.kv_cache_dtype}, use_mla={res.use_mla}, "
            f"use_sparse={res.use_sparse}. Reasons: {{{reasons}}}."
        )
        return out
    chosen = valid[0].backend
    out["attention_backend"] = chosen
    out["selection_error"] = _impl_error(kb.row_for(backends[chosen], version), ctx)
    return out


def _priority_list(prio_row, res: Resolution, cc) -> list[str]:
    if not res.use_mla:
        table = prio_row.non_mla
        return list(table["major_10"] if cc[0] == 10 else table["other"])
    table = prio_row.mla
    if cc[0] == 10:
        # 0.19+: an fp8* KV cache puts FLASHINFER_MLA_SPARSE first, whatever the head count
        fp8_order = prio_row.mla_major_10_fp8_kv
        if fp8_order and str(res.kv_cache_dtype).startswith("fp8"):
            return list(fp8_order)
        few = prio_row.mla_major_10_few_heads
        spec_heads = res.extra.get("num_heads")
        return list(few if few and spec_heads is not None and spec_heads <= 16 else table["major_10"])
    if cc[0] == 12 and table.get("major_12"):
        return list(table["major_12"])
    order = list(table["other"])
    if res.use_sparse and prio_row.mla_sparse:
        order = list(prio_row.mla_sparse) + order
    return order


def _legacy_select(backends, order, ctx, version, forced) -> dict:
    """vLLM 0.10/0.11: an if/else chain; the Impl then rejects what the chain did not check."""
    ctx = dict(ctx, legacy=True)
    cc = ctx["cc"]
    family = cc[0] * 10
    out: dict = {}
    if forced:
        row = kb.row_for(backends.get(forced, []), version)
        out["attention_backend"] = forced
        out["candidates"] = (Candidate(forced, ()),)
        out["selection_error"] = _impl_error(row, ctx) if row else None
        return out
    if ctx["use_mla"] and ctx["sparse"]:
        chosen = "FLASHMLA_SPARSE"
    elif ctx["use_mla"]:
        chosen = "TRITON_MLA"
        for name in order:
            if name in ("CUTLASS_MLA",) and family == 100 and ctx["block_size"] in (None, 128):
                chosen = name
                break
            if name in ("FLASHMLA", "FLASH_ATTN_MLA") and family == 90:
                chosen = name
                break
    else:
        chosen = _legacy_default(ctx, version)
    row = kb.row_for(backends.get(chosen, []), version)
    out["attention_backend"] = chosen
    out["candidates"] = (Candidate(chosen, ()),)
    out["selection_error"] = _impl_error(row, ctx) if row else None
    return out


def _legacy_default(ctx, version: str) -> str:
    """0.10/0.11's non-MLA default (legacy_default in attention.yaml): FLASHINFER only on the
    exact capabilities listed, TRITON_ATTN for sinks (and from 0.11 an fp8 KV cache) on 8.0+
    off 9.0, else FLASH_ATTN; FLEX_ATTENTION below 8.0."""
    cc = ctx["cc"]
    value = cc[0] * 10 + cc[1]
    row = kb.row_for(kb.load_file(ENGINE, "attention").get("legacy_default", []), version)
    flashinfer_at = row.flashinfer_capabilities if row is not None else [100]
    fp8_to_triton = bool(row.triton_for_fp8_kv) if row is not None else True
    if value in flashinfer_at:
        return "FLASHINFER"
    if value < 80:
        return "FLEX_ATTENTION"
    fp8 = str(ctx["kv"]).startswith("fp8") and fp8_to_triton
    return "TRITON_ATTN" if (ctx["sink"] or fp8) and value != 90 else "FLASH_ATTN"


def _impl_error(row, ctx) -> str | None:
    """Errors raised after selection, by the backend's Impl constructor or kernels."""
    if row is None:
        return None
    if ctx.get("sink"):
        refused = _sinks_refused(row, ctx)
        if refused:
            return refused
    kv = str(ctx["kv"])
    if kv.startswith("fp8") and row.impl_rejects_fp8:
        return row.impl_rejects_fp8
    if ctx.get("sliding_window") and row.impl_rejects_sliding_window:
        return row.impl_rejects_sliding_window
    cc_int = ctx["cc"][0] * 10 + ctx["cc"][1]
    if kv.startswith("fp8") and row.fp8_min_cc and cc_int < row.fp8_min_cc:
        return f"ValueError: native FP8 (fp8e4nv) requires SM{row['fp8_min_cc']}+ (this GPU is SM{cc_int})"
    if kv in ("fp8", "fp8_e4m3") and row.fp8_e4m3_min_cc and cc_int < row.fp8_e4m3_min_cc:
        return (f"triton.CompilationError: type fp8e4nv not supported in this architecture "
                f"(the KV cache write kernel needs SM{row['fp8_e4m3_min_cc']}+; this GPU is SM{cc_int})")
    return None


def _env_on(env: dict, name: str) -> bool | None:
    """An engine boolean environment variable: True, False, or None when unset."""
    value = str(env.get(name, "")).strip().lower()
    return None if value == "" else value in ("1", "true")


def _sinks_refused(row, ctx) -> str | None:
    """0.10/0.11 check attention sinks only once the backend is built: FlashAttention's Impl
    wants FA3, FlashInfer's metadata builder wants TRTLLM attention (exactly SM 10.0, cubins,
    not switched off), and 0.11.0's TRTLLM refuses sinks with the FP8 query of an fp8 KV cache."""
    env = ctx.get("env") or {}
    cc = ctx["cc"]
    # from 0.12 validation (supports_sink) has refused FLASH_ATTN before its Impl is built
    if row.impl_rejects_sinks_off_fa3 and ctx.get("legacy"):
        fa_version = str(env.get("VLLM_FLASH_ATTN_VERSION", "")).strip()
        if cc[0] != 9 or fa_version == "2":
            return row.impl_rejects_sinks_off_fa3
    if row.sinks_refused_without_trtllm_run and (ctx.get("trtllm_off") or ctx.get("dcp", 1) > 1):
        return row.sinks_refused_without_trtllm_run
    if row.sinks_need_trtllm:
        trtllm = (tuple(cc) == (10, 0) and ctx.get("trtllm_cubins") is not False
                  and not ctx.get("trtllm_off"))
        if not trtllm:
            return row.sinks_need_trtllm
        if (row.trtllm_fp8_query_rejects_sinks and str(ctx["kv"]).startswith("fp8")
                and not _env_on(env, "VLLM_FLASHINFER_DISABLE_Q_QUANTIZATION")):
            return row.trtllm_fp8_query_rejects_sinks
    return None


def _trtllm_switched_off(dep, version: str) -> bool:
    """TRTLLM attention switched off: --attention-config's use_trtllm_attention false (0.13+),
    or VLLM_USE_TRTLLM_ATTENTION=0 where vLLM reads its environment (the forcing rows'
    env_honoured: up to 0.14, PR #32812)."""
    ac = dep.launch.options.get("attention_config")
    if isinstance(ac, str):
        import json

        try:
            ac = json.loads(ac)
        except (ValueError, RecursionError):
            ac = None
    if isinstance(ac, dict) and ac.get("use_trtllm_attention") is not None:
        return str(ac["use_trtllm_attention"]).strip().lower() in ("false", "0")
    row = kb.row_for(kb.load_file(ENGINE, "attention").forcing, version)
    env = dep.launch.shell.env or {}
    honoured = row is not None and row.env_honoured
    return bool(honoured and _env_on(env, "VLLM_USE_TRTLLM_ATTENTION") is False)


def _int_option(value) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _note_legacy_sinks_host(out: dict, backends, ctx, version: str) -> dict:
    """0.10.2-0.11: FlashInfer with sinks runs only if the TRTLLM cubins can be had; with the
    host's network unknown, say what happens without them (no fallback in these releases)."""
    chosen = out.get("attention_backend")
    row = kb.row_for(backends.get(chosen, []), version) if chosen else None
    if not (row and ctx["sink"] and row.sinks_need_trtllm and ctx["trtllm_cubins"] is None
            and not out.get("selection_error")):
        return out
    note = (f"the environment decides: {chosen} takes the model's attention sinks only through "
            f"TRTLLM attention, whose cubins vLLM {version} downloads from NVIDIA's artifactory at "
            f"start-up; on a host without them it stops with \"{row.sinks_need_trtllm}\"")
    out["facts"].append(Evidence(note, row.source))
    out["environment_decides"] = {"backend": chosen, "without_cubins": None,
                                  "error_without_cubins": row.sinks_need_trtllm, "fact": note,
                                  "source": row.source}
    return out


def validate(row, ctx) -> list[str]:
    """A backend's validate_configuration(): the engine's reasons, in the engine's order."""
    reasons: list[str] = []
    cc = ctx["cc"]
    family = cc[0] * 10
    head = ctx["head_size"]
    if head is not None:
        rule = row.head_size_rule
        sizes = row.head_sizes
        if rule:
            ok = (head % rule.get("multiple_of",
                                  1) == 0) and head <= rule.get("max", 10**6) and head >= rule.get("min", 0)
        else:
            ok = not sizes or head in sizes
        if not ok:
            reasons.append("head_size not supported")
    dtypes = row.dtypes or ["float16", "bfloat16"]
    if ctx["dtype"] and ctx["dtype"] not in dtypes:
        reasons.append("dtype not supported")
    kv = ctx["kv"]
    if kv is not None:
        allowed = list(row.kv_cache_dtypes or [])
        fp8_values = row.fp8_kv_values
        if kv.startswith("fp8") and family in (row.fp8_kv_families or []) and (not fp8_values or kv in fp8_values):
            allowed.append(kv)
        if allowed and kv not in allowed:
            reasons.append("kv_cache_dtype not supported")
    if ctx["block_size"] is not None and not _block_ok(row.block_sizes or [], ctx["block_size"]):
        reasons.append("block_size not supported")
    if ctx["use_mla"] != bool(row.mla):
        reasons.append("MLA not supported" if ctx["use_mla"] else "non-MLA not supported")
    if ctx["sink"]:
        sinks = row.sink_families
        cubins_missing = row.sinks_need_trtllm_cubins and ctx.get("trtllm_cubins") is False
        # sink_capabilities: an exact-capability test (is_device_capability(100): not 10.3)
        exact = row.sink_capabilities
        off_capability = exact is not None and cc[0] * 10 + cc[1] not in exact
        if cubins_missing or off_capability or not (
                sinks == "any" or (isinstance(sinks, list) and family in sinks)):
            reasons.append("sink setting not supported")
    if ctx["sparse"] != bool(row.sparse):
        reasons.append("sparse not supported" if ctx["sparse"] else "non-sparse not supported")
    if not cc_ok(row.compute_capability or {"any": True}, cc):
        reasons.append("compute capability not supported")
    for combo in row.combination or []:
        if "when_sparse" in combo and combo["when_sparse"] != ctx["sparse"]:
            continue
        if combo.get("when_sink") and not ctx["sink"]:
            continue
        if "requires_kv_cache_dtype" in combo and kv is not None and kv not in combo["requires_kv_cache_dtype"]:
            reasons.append(combo["reason"])
        elif "requires_family" in combo and family not in combo["requires_family"]:
            reasons.append(combo["reason"])
        elif (
            "requires_qk_nope_head_dim" in combo
            and ctx["qk_nope_head_dim"] is not None
            and ctx["qk_nope_head_dim"] not in combo["requires_qk_nope_head_dim"]
        ):
            reasons.append(combo["reason"].format(qk_nope_head_dim=ctx["qk_nope_head_dim"]))
        elif "min_cc" in combo and cc[0] * 10 + cc[1] < combo["min_cc"]:
            reasons.append(combo["reason"])
    return reasons


def cc_ok(expr: dict, cc: tuple[int, int]) -> bool:
    """A compute-capability expression of attention.yaml against (major, minor)."""
    value = cc[0] * 10 + cc[1]
    if expr.get("any"):
        return True
    if "major_in" in expr:
        return cc[0] in expr["major_in"]
    return expr.get("min", 0) <= value <= expr.get("max", 10**6)


def _block_ok(sizes: list, block: int) -> bool:
    if not sizes:
        return True
    for s in sizes:
        base = s["multiple_of"] if isinstance(s, dict) else s
        if block % base == 0:
            return True
    return False


def _forced_backend(dep, version: str) -> tuple[str | None, str | None]:
    """The backend the operator forced, by flag, --attention-config or (where honoured) env."""
    opts = dep.launch.options
    name = opts.get("attention_backend")
    if name:
        return str(name).upper(), "--attention-backend"
    ac = opts.get("attention_config")
    if isinstance(ac, str):
        import json

        try:
            ac = json.loads(ac)
        except (ValueError, RecursionError):
            ac = None
    if isinstance(ac, dict) and ac.get("backend"):
        return str(ac["backend"]).upper(), "--attention-config"
    env_name = (dep.launch.shell.env or {}).get("VLLM_ATTENTION_BACKEND")
    row = kb.row_for(kb.load_file(ENGINE, "attention").forcing, version)
    if env_name and row is not None and row.env_honoured:
        return env_name.upper().removesuffix("_VLLM_V1"), "VLLM_ATTENTION_BACKEND"
    return None, None


# --- quantization ---------------------------------------------------------------------------


def engine_quant_method(dep, cc: tuple[int, int] | None, version: str) -> str | None:
    """The vLLM quantization method name the checkpoint (or --quantization) selects."""
    explicit = dep.launch.options.get("quantization")
    if explicit:
        return str(explicit)
    cfg, _ = effective_quant_config(dep, version)
    spec = dep.spec
    if cfg:
        method = _quant_method_of(cfg)
        if method == "modelopt" and str(cfg.get("quant_algo", "")).upper() == "NVFP4":
            method = "modelopt_fp4"
    elif spec is not None and spec.quant is not None:
        method = spec.quant.method
        if method == "modelopt":
            method = "modelopt_fp4" if (spec.quant.quant_algo or "").upper() == "NVFP4" else "modelopt"
    else:
        return None
    overrides = kb.row_for(kb.load_file(ENGINE, "quantization").marlin_overrides, version)
    if overrides and method in overrides.map and cc is not None:
        marlin = overrides.map[method]
        mrow = kb.row_for(kb.load_file(ENGINE, "quantization").methods.get(marlin, []), version)
        if mrow and cc[0] * 10 + cc[1] >= mrow.min_cc:
            method = marlin
    return method or None


def resolve_quant(dep, version: str, cc: tuple[int, int] | None, *, given: str | None = None) -> QuantKernels | None:
    """The method's kernels on this GPU. `given` is the version as asked, before clamping: a
    method row for releases older than the oldest read one (e.g. fp8 "<0.5.1") wins over the
    clamped version's row."""
    method = engine_quant_method(dep, cc, version)
    if method is None:
        return None
    rows = kb.load_file(ENGINE, "quantization").methods.get(method, [])
    row = (kb.row_for(rows, given) if given else None) or kb.row_for(rows, version)
    if row is None:
        return QuantKernels(method=method, supported=True, linear=None, source="")
    if cc is None:
        return QuantKernels(method=method, min_cc=row.min_cc, native_min_cc=row.native_min_cc, source=row.source)
    value = cc[0] * 10 + cc[1]
    if value < row.min_cc:
        return QuantKernels(
            method=method, min_cc=row.min_cc, native_min_cc=row.native_min_cc, supported=False, source=row.source,
            error=f"The quantization method {method} is not supported for the current GPU. Minimum capability: "
                  f"{row['min_cc']}. Current capability: {value}.",
        )
    native_min = row.native_min_cc
    if method == "compressed-tensors":
        scheme = (dep.spec.quant.quant_algo or "").lower() if dep.spec and dep.spec.quant else ""
        native_min = next((v for k, v in row.scheme_native_min_cc.items() if k in scheme), None)
    families = row.native_families
    # native_max_cc: a kernel gated on one exact capability (mxfp4's FlashInfer on 10.0 only
    # up to 0.12: is_device_capability(100))
    below_max = row.native_max_cc is None or value <= row.native_max_cc
    native = ((native_min is None or value >= native_min)
              and (not families or cc[0] * 10 in families) and below_max)
    linear = "native" if native else row.fallback
    moe = None
    if dep.spec is not None and dep.spec.is_moe:
        moe_families = row.moe_native_families
        moe_native = native if moe_families is None else cc[0] * 10 in moe_families and below_max
        moe = "native" if moe_native else (row.fallback or "unsupported")
        native = native and moe_native
    fallback = not native and bool(row.fallback)
    later = _native_from(method, cc, given or version) if fallback else None
    return QuantKernels(method=method, min_cc=row.min_cc, native_min_cc=native_min, linear=linear,
                        moe=moe, fallback=fallback, supported=True, source=row.source,
                        native_from=later)


def _native_from(method: str, cc, version: str | None) -> str | None:
    """The first later vLLM release (a row's lower bound in quantization.yaml) whose kernels for
    `method` are native on this GPU, e.g. mxfp4 on Hopper from 0.12 (triton_kernels shipped)."""
    from packaging.version import Version

    if not version or cc is None:
        return None
    value, family = cc[0] * 10 + cc[1], cc[0] * 10
    for row in kb.load_file(ENGINE, "quantization").methods.get(method, []):
        bounds = str(row.versions).split(",")
        low = next((part[2:] for part in bounds if part.startswith(">=")), None)
        if low is None or Version(low) <= Version(version):
            continue
        native_min = row.native_min_cc
        families = row.native_families
        moe_families = row.moe_native_families
        if ((native_min is None or value >= native_min) and (not families or family in families)
                and (moe_families is None or family in moe_families)):
            return low
    return None


# --- model facts ----------------------------------------------------------------------------


def _gpu_cc(dep) -> tuple[int, int] | None:
    ccs = [g.compute_capability for g in dep.cluster.gpus if g.compute_capability]
    # vLLM checks the current device; with mixed GPUs the lowest one is what breaks first
    return min(ccs) if ccs else None


def _model_dtype(spec, opts, cc=None) -> str | None:
    """ModelConfig's dtype: explicit --dtype, else the config's, downcast and GPU-checked.

    vllm/config/model.py@v0.16.0 _resolve_auto_dtype: float32 checkpoints run in the GPU's
    first supported dtype; bfloat16 needs compute capability 8.0, else float16
    (vllm/platforms/cuda.py supported_dtypes).
    """
    dtype = opts.get("dtype")
    if dtype and dtype != "auto":
        return {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype)
    if spec is None:
        return None
    preferred = "float16" if cc is not None and cc < (8, 0) else "bfloat16"
    config_dtype = spec.dtype or "bfloat16"
    if config_dtype == "float32" or (config_dtype == "bfloat16" and preferred == "float16"):
        return preferred
    return config_dtype


def _storage(kv: str | None, model_dtype: str | None) -> str | None:
    if kv is None:
        return None
    if kv == "auto":
        return model_dtype
    return kv


def _head_size(spec, use_mla: bool) -> int | None:
    if spec is None or spec.attention is None:
        return None
    if use_mla:
        return spec.attention.mla_head_size
    if spec.is_mla:  # VLLM_MLA_DISABLE: qk_rope + qk_nope per head
        a = spec.attention
        return (a.qk_rope_head_dim or 0) + (a.qk_nope_head_dim or 0) or a.head_dim
    return spec.attention.head_dim


def _sliding_window(spec) -> int | None:
    """The model's sliding window, when any of its attention layers uses one."""
    attention = spec.attention if spec is not None else None
    return attention.sliding_window if attention is not None else None


def _has_sink(spec, version: str | None = None) -> bool:
    """Whether the model's attention layers pass learned sinks (sink_models in attention.yaml:
    gpt-oss always, MiMo-V2-Flash when its config switches them on)."""
    if spec is None:
        return False
    rows = kb.load_file(ENGINE, "attention").get("sink_models", [])
    types = (spec.model_type, spec.text_model_type)
    for row in (kb.rows_for(rows, version) if version else rows):
        if row.model_type not in types:
            continue
        if row.config_flag is None:
            return True
        configs = (spec.text_config or {}, spec.config or {})
        if any(str(c.get(row.config_flag)).lower() == "true" for c in configs):
            return True
    return False


def _hf_overrides(opts) -> dict:
    value = opts.get("hf_overrides")
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return {}
    return value if isinstance(value, dict) else {}


def _clamp(version: str) -> str:
    """Versions below the oldest read release use its facts (rows start at 0.10.0)."""
    from packaging.version import Version

    oldest, _ = kb.known_range(ENGINE)
    return oldest if Version(kb.release_of(version)) < Version(oldest) else version
