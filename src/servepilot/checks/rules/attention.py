"""Attention backend selection and KV cache dtype: the rules of the story."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import ANY_PLATFORM, rule
from servepilot.checks.remedies import kv_remedies

KNOWLEDGE = "servepilot/engines/vllm/knowledge/attention.yaml"
KV_KNOWLEDGE = "servepilot/engines/vllm/knowledge/kv_cache.yaml"


def _kv_dtype_is_the_cause(dep, ctx, res) -> bool:
    """Whether the quantized KV cache is what breaks the launch: a kernel refused it after
    selection, or the same command with a 16-bit KV cache finds a valid backend."""
    kv = str(res.kv_cache_dtype or "auto")
    if kv == "auto":
        return False
    if res.attention_backend and kv.startswith("fp8"):
        return True  # the engine got past selection and a kernel refused the fp8 cache
    # "auto" keeps a checkpoint's own fp8 KV scheme; an explicit 16-bit dtype overrides it
    for sixteen_bit in ("auto", "bfloat16"):
        if sixteen_bit != "auto" and sixteen_bit not in (res.kv_valid_values or ()):
            continue
        again = ctx.resolver.resolve_with(dep, kv_cache_dtype=sixteen_bit)
        if not again.fails and str(again.kv_cache_dtype) in ("auto", "bfloat16", "float16"):
            return True
    return False


def _evidence(facts) -> tuple[Evidence, ...]:
    return tuple(Evidence(f.fact, f.source) for f in facts)


@rule(
    "SP-ATTN-001", "attention_backend", "No attention backend accepts this configuration",
    facts=(
        "vLLM walks a priority list of attention backends per platform and compute capability and keeps those whose "
        "validate_configuration() returns no reason; none valid raises 'No valid attention backend found'.",
        "A forced backend (--attention-backend, --attention-config, VLLM_ATTENTION_BACKEND up to 0.14) is validated "
        "too: 'Selected backend X is not valid for this configuration. Reason: [...]'.",
        "On compute capability 12.x only TRITON_MLA passes the MLA capability tests; it accepts an fp8 KV cache only "
        "from vLLM 0.18.0 (PR #34597).",
        "vLLM 0.10/0.11 choose without validating; TRITON_MLA's Impl then raises NotImplementedError for an fp8 KV "
        "cache.",
        "Attention sinks (gpt-oss) in 0.10/0.11: a forced FLASH_ATTN asserts FA3 (compute "
        "capability 9.x only); FlashInfer needs TRTLLM attention (SM 10.0, cubins, "
        "VLLM_USE_TRTLLM_ATTENTION not 0), and 0.11.0's TRTLLM refuses sinks with the FP8 query "
        "an fp8 KV cache brings. From 0.12 FlashInfer is valid for sinks on SM100 but its "
        "metadata builder raises when TRTLLM attention is switched off or -dcp > 1 keeps it from "
        "running.",
    ),
    sources=(KNOWLEDGE, "vllm/platforms/cuda.py@v0.16.0", "vllm/v1/attention/backend.py@v0.16.0",
             "https://github.com/vllm-project/vllm/pull/34597"),
    engines=("vllm",),
)
def attention_backend_fails(dep, ctx) -> list[Finding]:
    res = ctx.resolution
    if not res.fails:
        return []
    gpu = dep.cluster.gpus[0].name if dep.cluster.gpus else "the GPU"
    cc = f"{res.gpu_cc[0]}.{res.gpu_cc[1]}" if res.gpu_cc else "?"
    lines = [f"vLLM {res.engine_version} on {gpu} (compute capability {cc}) will stop at start-up:",
             f"  {res.selection_error}"]
    lines.append(f"KV cache dtype: {res.kv_cache_dtype} (requested {res.kv_requested}).")
    for f in res.kv_evidence:
        lines.append(f"  - {f.fact}")
    if res.candidates:
        lines.append("Backends tried, in the engine's order:")
        for c in res.candidates:
            lines.append(f"  - {c.backend}: {', '.join(c.reasons) if c.reasons else 'valid'}")
    if res.forced_backend:
        lines.append(f"Backend forced by {res.forced_by}: {res.forced_backend}.")
    evidence = _evidence(res.kv_evidence) + tuple(
        Evidence(f"{c.backend}: {', '.join(c.reasons) or 'valid'}",
                 _backend_source(res, c.backend)) for c in res.candidates
    )
    if dep.spec is not None and dep.spec.is_mla and dep.spec.attention:
        a = dep.spec.attention
        evidence += (Evidence(f"MLA head size {res.head_size} = kv_lora_rank {a.kv_lora_rank} "
                              f"+ qk_rope_head_dim {a.qk_rope_head_dim}", f"{dep.spec.path}/config.json"),)
    remedies = kv_remedies(dep, ctx)
    if res.forced_backend and res.forced_by not in (None, "vLLM's SM100 default (check_and_update_config)"):
        remedies = [_unforce_remedy(res)] + remedies
    category = "kv_cache_dtype" if _kv_dtype_is_the_cause(dep, ctx, res) else "attention_backend"
    quantized_kv = str(res.kv_cache_dtype or "auto") not in ("auto", "bfloat16", "float16")
    return [
        Finding(
            code="SP-ATTN-001",
            category=category,
            severity="error",
            # a backend the engine picked itself and whose kernels refuse the model, not its KV cache
            title=f"{res.attention_backend} cannot serve this model's attention on compute capability {cc}"
            if res.attention_backend and not res.forced_backend and not quantized_kv
            else f"{res.attention_backend} cannot use the {res.kv_cache_dtype} KV cache on compute capability {cc}"
            if res.attention_backend and not res.forced_backend
            else f"No attention backend for {res.kv_cache_dtype} KV cache on compute capability {cc}"
            if not res.forced_backend
            else f"Forced attention backend {res.forced_backend} is not valid here",
            detail="\n".join(lines),
            evidence=evidence,
            remedies=tuple(remedies),
        )
    ]


def _unforce_remedy(res) -> Remedy:
    if res.forced_by == "VLLM_ATTENTION_BACKEND":
        return Remedy("env", "unset VLLM_ATTENTION_BACKEND", "vLLM picks the backend itself from its priority list",
                      {"env": {"set": {}, "unset": ["VLLM_ATTENTION_BACKEND"]}})
    dest = "attention_backend" if res.forced_by == "--attention-backend" else "attention_config"
    return Remedy("flag", f"drop {res.forced_by}", "vLLM picks the backend itself from its priority list",
                  {"set": {}, "unset": [dest]})


def _backend_source(res, name: str) -> str:
    for f in res.facts:
        if f.fact.startswith(f"{name}:"):
            return f.source
    return KNOWLEDGE


@rule(
    "SP-ATTN-003", "attention_backend", "Logits soft-capping needs a backend that applies it (vLLM before 0.10)",
    facts=("vLLM 0.5.1-0.5.3 refused every backend but FlashInfer for models with logits soft-capping (Gemma 2).",
           "From 0.5.4 FlashAttention-2 applies it on compute capability 8.0+; below that vLLM falls back to XFormers, "
           "which raises 'XFormers does not support attention logits soft capping.'",
           "VLLM_ATTENTION_BACKEND=FLASHINFER (with flashinfer installed) avoids both."),
    sources=(KNOWLEDGE, "https://github.com/vllm-project/vllm/issues/7060",
             "https://github.com/vllm-project/vllm/issues/8929"),
    engines=("vllm",),
)
def soft_cap_backend(dep, ctx) -> list[Finding]:
    spec = dep.spec
    version = dep.engine_version  # as given: these releases predate the ones the resolver reads
    if spec is None or version is None:
        return []
    cfg = spec.text_config or spec.config or {}
    cap = next((cfg.get(k) for k in ("attn_logit_softcapping", "final_logit_softcapping") if cfg.get(k)), None)
    row = ctx.resolution.release.logits_soft_cap
    if cap is None or row is None or row.get("fa3_without_softcap"):
        return []  # the FA3 build of 0.10.1-0.16 is SP-ATTN-009's
    env_backend = str((dep.launch.shell.env or {}).get("VLLM_ATTENTION_BACKEND", "")).upper()
    if env_backend == row.needs_backend:
        return []
    cc = ctx.resolution.gpu_cc
    if row.fa2_min_cc is not None:
        if cc is None or cc[0] * 10 + cc[1] >= row.fa2_min_cc:
            return []
        why = (f"compute capability {cc[0]}.{cc[1]} has no FlashAttention-2 (needs {row['fa2_min_cc'] / 10:.1f}), "
               f"so vLLM {version} falls back to XFormers")
    else:
        why = f"vLLM {version} applies soft-capping only in FlashInfer"
    return [Finding("SP-ATTN-003", "attention_backend", "error", f"soft-capped attention ({cap}) has no backend here",
                    f"The model caps attention logits; {why}. The engine will raise: {row['message']}",
                    (Evidence(f"logits soft-capping {cap}",
                              f"{spec.path}/config.json"),
                     Evidence(f"soft-capping needs {row['needs_backend']} in this release", row.source)),
                    (Remedy("env", f"VLLM_ATTENTION_BACKEND={row['needs_backend']} (pip install flashinfer)",
                            "FlashInfer must be installed for this torch/CUDA",
                            {"env": {"set": {"VLLM_ATTENTION_BACKEND": row.needs_backend}, "unset": []}}),
                     Remedy("upgrade", "pip install 'vllm>=0.10.0'", "newer releases select a soft-capping backend "
                                                                     "themselves",
                            {"upgrade": {"package": "vllm", "specifier": ">=0.10.0"}})))]


@rule(
    "SP-ATTN-009", "attention_backend",
    "FlashAttention 3 built without soft-capping (vLLM 0.10.1-0.16 on Hopper)",
    facts=("On compute capability 9.x vLLM's FLASH_ATTN backend runs FlashAttention 3.",
           "The vllm-flash-attn FA3 module pinned by vLLM 0.10.1-0.16.x is compiled with "
           "FLASHATTENTION_DISABLE_SOFTCAP: a model with attention soft-capping (Gemma 2) is "
           "selected normally and its first forward pass raises 'This flash attention build "
           "does not support tanh softcapping.'",
           "FlashAttention 2 (VLLM_FLASH_ATTN_VERSION=2) or FlashInfer applies the cap; 0.18.0's "
           "pin builds FA3 with it."),
    sources=(KNOWLEDGE, "https://github.com/vllm-project/flash-attention "
                        "(CMakeLists.txt at the pinned commits)"),
    engines=("vllm",),
)
def fa3_without_soft_cap(dep, ctx) -> list[Finding]:
    res = ctx.resolution
    row = res.release.logits_soft_cap
    spec = dep.spec
    if row is None or not row.get("fa3_without_softcap") or spec is None or res.gpu_cc is None:
        return []
    cap = (spec.text_config or spec.config or {}).get("attn_logit_softcapping")
    hopper_fa = res.attention_backend == "FLASH_ATTN" and res.gpu_cc[0] == 9
    if not cap or not hopper_fa or _fa_version_forced(dep):
        return []
    return [Finding(
        "SP-ATTN-009", "attention_backend", "error",
        f"FlashAttention 3 here is built without soft-capping ({cap})",
        f"vLLM {res.engine_version} runs FLASH_ATTN as FlashAttention 3 on compute capability "
        f"{res.gpu_cc[0]}.{res.gpu_cc[1]}, and the FA3 build it ships leaves soft-capping out. "
        f"The model caps attention logits at {cap}; the first forward pass (profiling or "
        f"CUDA-graph capture) will raise: {row['message']}",
        (Evidence(f"attn_logit_softcapping {cap}", f"{spec.path}/config.json"),
         Evidence("vllm-flash-attn FA3 compiled with FLASHATTENTION_DISABLE_SOFTCAP", row.source)),
        (Remedy("env", "VLLM_FLASH_ATTN_VERSION=2",
                "FlashAttention 2 on Hopper: slower than FA3, applies the cap",
                {"env": {"set": {"VLLM_FLASH_ATTN_VERSION": "2"}, "unset": []}}),
         _flashinfer_remedy(res),
         Remedy("upgrade", "pip install 'vllm>=0.18.0'",
                "a release whose FA3 build applies soft-capping",
                {"upgrade": {"package": "vllm", "specifier": ">=0.18.0"}})),
    )]


def _flashinfer_remedy(res) -> Remedy:
    """FlashInfer, forced the way the release reads it (the variable before --attention-backend)."""
    forcing = res.release.backend_forcing
    if forcing is None or forcing.flag is None:
        return Remedy("env", "VLLM_ATTENTION_BACKEND=FLASHINFER", "needs flashinfer installed",
                      {"env": {"set": {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, "unset": []}})
    return Remedy("flag", "--attention-backend FLASHINFER", "needs flashinfer installed",
                  {"set": {"attention_backend": "FLASHINFER"}, "unset": []})


def _fa_version_forced(dep) -> bool:
    """FlashAttention 2 asked for: VLLM_FLASH_ATTN_VERSION=2, or attention_config's
    flash_attn_version."""
    env = dep.launch.shell.env or {}
    if str(env.get("VLLM_FLASH_ATTN_VERSION", "")).strip() == "2":
        return True
    config = dep.launch.get("attention_config")
    return isinstance(config, dict) and str(config.get("flash_attn_version")) == "2"


@rule(
    "SP-ATTN-002", "attention_backend", "VLLM_ATTENTION_BACKEND is ignored or deprecated",
    facts=(
        "VLLM_ATTENTION_BACKEND was deprecated for --attention-backend (PR #26315) and honoured with a warning up to "
        "0.14.x.",
        "From vLLM 0.15 the variable is no longer read at all (PR #32812): setting it does nothing, silently.",
    ),
    sources=(KNOWLEDGE, "https://github.com/vllm-project/vllm/pull/26315",
             "https://github.com/vllm-project/vllm/pull/32812"),
    engines=("vllm",),
)
def attention_env_ignored(dep, ctx) -> list[Finding]:
    value = (dep.launch.shell.env or {}).get("VLLM_ATTENTION_BACKEND")
    res = ctx.resolution
    if not value or res.engine_version is None:
        return []
    row = res.release.backend_forcing
    if row is None or (row.env_honoured and not row.env_deprecated):
        return []
    flag = row.flag or "--attention-backend"
    remedy = Remedy("flag", f"{flag} {value}", "the supported way to force a backend; still validated by the engine",
                    {"set": {"attention_backend": value}, "unset": []})
    unset = Remedy("env", "unset VLLM_ATTENTION_BACKEND", "no effect on the launch; removes a misleading setting",
                   {"env": {"set": {}, "unset": ["VLLM_ATTENTION_BACKEND"]}})
    if row.env_honoured:
        return [Finding("SP-ATTN-002", "attention_backend", "warning", "VLLM_ATTENTION_BACKEND is deprecated",
                        f"vLLM {res.engine_version} still honours VLLM_ATTENTION_BACKEND={value} but warns; use "
                        f"{flag}.",
                        (Evidence(f"env honoured, deprecated in vLLM {res.engine_version}", row.source),), (remedy,))]
    return [Finding("SP-ATTN-002", "attention_backend", "warning", "VLLM_ATTENTION_BACKEND is silently ignored",
                    f"vLLM {res.engine_version} no longer reads VLLM_ATTENTION_BACKEND={value}: the engine picks "
                    f"{res.attention_backend or 'its backend'} from its own priority list instead.",
                    (Evidence(f"env not read in vLLM {res.engine_version}", row.source),), (remedy, unset))]


@rule(
    "SP-KV-001", "kv_cache_dtype", "KV cache dtype not accepted by this engine version",
    facts=("--kv-cache-dtype is a closed list (CacheDType) per version: bfloat16 from 0.11, fp8_ds_mla from 0.12, "
           "float16 from 0.18.",),
    sources=(KV_KNOWLEDGE, "vllm/config/cache.py@v0.16.0", "vllm/config/cache.py@v0.18.0",
             "sglang/srt/server_args.py@v0.5.2", "llama.cpp common/arg.cpp"), platforms=ANY_PLATFORM,
)
def kv_dtype_invalid(dep, ctx) -> list[Finding]:
    res = ctx.resolution
    if res.kv_valid:
        return []
    remedies = []
    model_dtype = res.model_dtype or "bfloat16"
    if model_dtype in res.kv_valid_values:
        remedies.append(Remedy("flag", f"--kv-cache-dtype {model_dtype}", "same storage as the model dtype",
                               {"set": {"kv_cache_dtype": model_dtype}, "unset": []}))
    remedies.append(Remedy("flag", "--kv-cache-dtype auto",
                           "the engine default: model dtype, or the checkpoint's KV scheme",
                           {"set": {"kv_cache_dtype": "auto"}, "unset": []}))
    config_error = res.extra.get("config_error")
    if config_error:  # a valid value the engine refuses for this model dtype (vLLM 0.33+)
        return [Finding("SP-KV-001", "kv_cache_dtype", "error", f"KV cache dtype {res.kv_requested} does not match the "
                                                                f"model dtype {model_dtype}",
                        f"{dep.engine} {res.engine_version} stops while building its configuration:\n  {config_error}",
                        _evidence(res.kv_evidence), tuple(remedies))]
    return [
        Finding(
            "SP-KV-001",
            "kv_cache_dtype",
            "error",
            f"KV cache dtype {res.kv_requested} is not valid for {dep.engine} {res.engine_version or ''}".rstrip(),
            f"{dep.engine} {res.engine_version or ''} accepts: {', '.join(res.kv_valid_values)}. The argument "
            "parser rejects anything else.",
            _evidence(res.kv_evidence),
            tuple(remedies),
        )
    ]


@rule(
    "SP-KV-002", "kv_cache_dtype", "compressed-tensors KV scheme overrides an explicit --kv-cache-dtype",
    facts=("vLLM 0.16-0.18: the non-MLA Attention layer sets kv_cache_dtype = fp8 whenever a compressed-tensors "
           "kv_cache_scheme exists, even over --kv-cache-dtype bfloat16; MLA layers do not.",),
    sources=(KV_KNOWLEDGE, "vllm/model_executor/layers/attention/attention.py@v0.16.0"),
    engines=("vllm",), platforms=ANY_PLATFORM,
)
def compressed_tensors_forced(dep, ctx) -> list[Finding]:
    res = ctx.resolution
    if not res.non_mla_kv_forced or res.kv_requested in ("auto", None) or str(res.kv_requested).startswith("fp8"):
        return []
    return [Finding("SP-KV-002", "kv_cache_dtype", "warning", f"--kv-cache-dtype {res.kv_requested} is overridden to "
                                                              "fp8",
                    f"The checkpoint's compressed-tensors kv_cache_scheme makes vLLM {res.engine_version} store the KV "
                    "cache as fp8 in every attention layer, whatever --kv-cache-dtype says.",
                    _evidence(res.kv_evidence),
                    (Remedy("upgrade", "pip install 'vllm>=0.34.0'", "from 0.34 an explicit --kv-cache-dtype wins",
                            {"upgrade": {"package": "vllm", "specifier": ">=0.34.0"}}),))]


@rule(
    "SP-KV-003", "kv_cache_dtype", "A quantized V cache without flash attention (llama.cpp)",
    facts=("llama.cpp refuses a quantized V cache unless flash attention is on: 'V cache quantization requires "
           "flash_attn'.",),
    sources=("servepilot/engines/llamacpp/knowledge/kv_cache.yaml", "llama.cpp src/llama-context.cpp "
                                                                    "(llama_init_from_model)"),
    engines=("llama.cpp",),
)
def llamacpp_v_cache(dep, ctx) -> list[Finding]:
    res = ctx.resolution
    quantized_v = res.extra.get("cache_type_v") not in (None, "f16", "f32", "bf16")
    if not res.fails and not (quantized_v and res.extra.get("flash_attn") is None):
        return []
    if res.fails:
        severity, detail = "error", f"{res.selection_error}: the server exits while creating the context."
    else:
        severity, detail = "warning", ("--flash-attn is not given: builds whose default is off refuse a quantized V "
                                       "cache "
                                       "('V cache quantization requires flash_attn'); newer builds default to auto.")
    return [Finding("SP-KV-003", "kv_cache_dtype", severity, "quantized V cache needs --flash-attn", detail,
                    _evidence(res.kv_evidence),
                    (Remedy("flag", "--flash-attn on", "flash attention kernels (supported on most GPUs and the CPU)",
                            {"set": {"flash_attn": "on"}, "unset": []}),
                     Remedy("flag", "--cache-type-v f16", "V cache twice the size of q8_0",
                            {"set": {"cache_type_v": "f16"}, "unset": []})))]


@rule(
    "SP-KV-004", "kv_cache_dtype", "FP8 KV cache on vLLM's early V1 engine",
    facts=("vLLM 0.7.x's opt-in V1 engine (VLLM_USE_V1=1) has no FP8 KV cache path.",
           "vLLM 0.8-0.9 run an FP8 KV cache on V1 only through FlashAttention 3 (compute capability 9.x); elsewhere "
           "they fall back to V0, or raise 'VLLM_USE_V1=1 is not supported with --kv-cache-dtype' when VLLM_USE_V1=1 "
           "is set."),
    sources=(KV_KNOWLEDGE, "vllm/engine/arg_utils.py@v0.8.5", "https://github.com/vllm-project/vllm/pull/14221"),
    engines=("vllm",),
)
def v1_fp8_kv_cache(dep, ctx) -> list[Finding]:
    version = dep.engine_version or ctx.resolution.engine_version
    kv = str(dep.launch.get("kv_cache_dtype") or "auto")
    if version is None or not kv.startswith("fp8"):
        return []
    fact = ctx.resolution.release.v1_fp8_kv_cache
    env = dep.launch.shell.env or {}
    if fact is None or str(env.get("VLLM_USE_V1", "")).strip() not in ("1", "true", "True"):
        return []  # V1 not asked for: 0.7 runs V0, 0.8-0.9 fall back to V0 by themselves
    backend = str(env.get("VLLM_ATTENTION_BACKEND", "") or "")
    cc = dep.cluster.gpus[0].compute_capability if dep.cluster.gpus else None
    majors = fact.supported_cc_majors or []
    if majors and backend in ("", "FLASH_ATTN_VLLM_V1") and cc is not None and cc[0] in majors:
        return []
    if majors and cc is None and not backend:
        severity, why = "warning", (f"vLLM {version} keeps it on V1 only with FlashAttention 3 on compute capability "
                                    f"{'/'.join(f'{m}.x' for m in majors)}; the GPU is not known here.")
    else:
        severity, why = (
            "error",
            (
                f"vLLM {version}'s V1 engine has no FP8 KV cache path for this setup"
                + (
                    f" (only FlashAttention 3 on compute capability {'/'.join(f'{m}.x' for m in majors)})."
                    if majors
                    else "."
                )
            ),
        )
    return [Finding("SP-KV-004", "kv_cache_dtype", severity, f"--kv-cache-dtype {kv} with VLLM_USE_V1=1 on vLLM "
                                                             f"{version}",
                    why + " VLLM_USE_V1=1 forbids the fallback to the V0 engine.",
                    (Evidence(f"VLLM_USE_V1=1, --kv-cache-dtype {kv}",
                              "command line"), Evidence(f"V1 FP8 KV cache in vLLM {fact.versions}", fact.source)),
                    (Remedy("env", "unset VLLM_USE_V1", "the V0 engine runs the FP8 KV cache",
                            {"env": {"set": {}, "unset": ["VLLM_USE_V1"]}}),
                     Remedy("flag", "--kv-cache-dtype auto", "a 16-bit KV cache, twice the memory per token",
                            {"set": {"kv_cache_dtype": "auto"}, "unset": []})))]


@rule(
    "SP-ATTN-005", "attention_backend", "The host decides the backend for attention sinks",
    facts=(
        "FlashInfer takes attention sinks (gpt-oss) only through its TRTLLM kernels, whose cubins vLLM finds installed "
        "(flashinfer-cubin, VLLM_HAS_FLASHINFER_CUBIN=1) or downloads from NVIDIA's artifactory at start-up; "
        "has_nvidia_artifactory() makes an HTTP request then.",
        "Without them FlashInfer reports 'sink setting not supported' and vLLM takes the next backend (TRITON_ATTN).",
        "vLLM 0.10.2 - 0.11 choose FlashInfer on SM 10.0 without validating it: without the "
        "cubins its metadata builder raises 'FlashInfer backend currently does not support "
        "attention sinks' (no fallback).",
    ),
    sources=(KNOWLEDGE, "vllm/utils/flashinfer.py@v0.18.0 (has_nvidia_artifactory, supports_trtllm_attention)",
             "vllm/v1/attention/backends/flashinfer.py@v0.18.0 (supports_sink)",
             "vllm/v1/attention/backends/flashinfer.py@v0.10.2 and @v0.11.0 "
             "(FlashInferMetadataBuilder: has_sinks)"),
    engines=("vllm",),
)
def sinks_backend_depends_on_host(dep, ctx) -> list[Finding]:
    decides = ctx.resolution.extra.get("environment_decides")
    if not decides:
        return []
    instead = decides["without_cubins"] or "no valid backend"
    # 0.10.2-0.11 do not fall back: without the cubins FlashInfer's builder raises
    error = decides.get("error_without_cubins")
    outcome = f"stops with '{error}'" if error else f"picks {instead}"
    detail = (f"{decides['backend']} is predicted on the assumption that FlashInfer's TRTLLM cubins are available "
              "where "
              f"vLLM runs: NVIDIA's artifactory reachable at start-up, or flashinfer-cubin installed "
              f"(VLLM_HAS_FLASHINFER_CUBIN=1). On an air-gapped host without them vLLM {outcome}. "
              f"`check --ask-engine` on the serving host asks the engine itself.")
    if error:
        instead = "a start-up error"
    return [Finding("SP-ATTN-005", "attention_backend", "info", f"{decides['backend']} or {instead}: the host's "
                                                                "network decides",
                    detail, (Evidence(decides["fact"], decides["source"]),),
                    (Remedy("env", "VLLM_HAS_FLASHINFER_CUBIN=1 (with pip install flashinfer-cubin)",
                            "the cubins come from the package, not the network; FlashInfer keeps the sinks",
                            {"env": {"set": {"VLLM_HAS_FLASHINFER_CUBIN": "1"}, "unset": []}}),))]


@rule(
    "SP-ATTN-013", "attention_backend", "VLLM_ATTENTION_BACKEND names no backend of this release",
    facts=(
        "The variable must spell one of the release's backend enum names exactly "
        "(case-sensitive).",
        "vLLM 0.10 knows TRITON_ATTN_VLLM_V1 and refuses TRITON_ATTN in its selector ('Invalid "
        "attention backend'); 0.11-0.14 validate the variable when it is first read ('Invalid "
        "value ... for VLLM_ATTENTION_BACKEND'), so the old *_VLLM_V1 names stop them.",
    ),
    sources=(KNOWLEDGE, "vllm/attention/selector.py@v0.10.2", "vllm/envs.py@v0.11.0",
             "vllm/envs.py@v0.13.0"),
    engines=("vllm",),
)
def attention_env_unknown_name(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.release import env_backend_names

    value = (dep.launch.shell.env or {}).get("VLLM_ATTENTION_BACKEND")
    version = ctx.resolution.engine_version
    row = env_backend_names(version) if value and version else None
    if row is None or value in row.names:
        return []
    names = list(row.names)
    near = [n for n in names if n == str(value).upper()
            or n == str(value).upper().removesuffix("_VLLM_V1")
            or n == f"{str(value).upper()}_VLLM_V1"]
    message = row["message"].format(value=value, names=names)
    remedies = [Remedy("env", f"VLLM_ATTENTION_BACKEND={near[0]}",
                       f"the name vLLM {version} spells for that backend",
                       {"env": {"set": {"VLLM_ATTENTION_BACKEND": near[0]}, "unset": []}})
                ] if near else []
    remedies.append(Remedy("env", "unset VLLM_ATTENTION_BACKEND",
                           "vLLM picks the backend itself from its priority list",
                           {"env": {"set": {}, "unset": ["VLLM_ATTENTION_BACKEND"]}}))
    return [Finding("SP-ATTN-013", "attention_backend", "error",
                    f"VLLM_ATTENTION_BACKEND={value} is not a backend name in vLLM {version}",
                    f"vLLM {version} stops at start-up:\n  {message}",
                    (Evidence(f"VLLM_ATTENTION_BACKEND={value}", "environment"),
                     Evidence(f"backend names of vLLM {version}", row.source)),
                    tuple(remedies))]
