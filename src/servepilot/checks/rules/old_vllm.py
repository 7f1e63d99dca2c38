"""vLLM releases before 0.10.0: the V1 oracle's refusals, the attention backend the release
picks and refuses, and pipeline parallelism limited to listed architectures (0.5.1-0.6.2)."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.old_vllm import (
    KNOWLEDGE,
    bnb_config_refusal,
    bnb_model_class_refusal,
    lmcache_v0_refusal,
    old_selection,
    oracle_refusals,
    pp_refusal,
    use_v1_env,
)
from servepilot.checks.registry import ANY_PLATFORM, rule

_UNSET_V1 = Remedy(
    "env",
    "unset VLLM_USE_V1",
    "the V0 engine runs instead (slower scheduling, no torch.compile)",
    {"env": {"set": {}, "unset": ["VLLM_USE_V1"]}},
)


@rule(
    "SP-V1-001",
    "attention_backend",
    "VLLM_USE_V1=1 with a feature vLLM 0.8-0.9's V1 engine lacks",
    facts=(
        "From 0.8.0 to 0.9.x create_engine_config asks _is_v1_supported_oracle whether V1 can run "
        "the "
        "configuration: with VLLM_USE_V1 unset a missing feature falls back to V0, with "
        "VLLM_USE_V1=1 it raises "
        "NotImplementedError('VLLM_USE_V1=1 is not supported with <feature>.') before any worker "
        "starts.",
        "Features servepilot reads: compute capability below 8.0 (0.8.0-0.9.x), a dtype other "
        "than float16 / "
        "bfloat16 (0.8.0-0.9.1), --kv-transfer-config (0.8.0-0.8.4), bitsandbytes (0.8.0-0.8.2) "
        "and "
        "gguf (0.8.0-0.8.5) quantization.",
    ),
    sources=(
        KNOWLEDGE,
        "vllm/engine/arg_utils.py@v0.8.0, @v0.8.5 and @v0.9.2 (_is_v1_supported_oracle, "
        "_raise_or_fallback)",
    ),
    engines=("vllm",),
)
def v1_oracle_refuses(dep, ctx) -> list[Finding]:
    version = dep.engine_version
    if not version or use_v1_env(dep) is not True or dep.cluster.platform != "cuda":
        return []
    res = ctx.resolution
    tripped = oracle_refusals(dep, res, version)
    if not tripped:
        return []
    row, value = tripped[0]  # the oracle returns at its first unsupported feature
    message = row.message.replace("{value}", str(value))
    category = row.category
    return [
        Finding(
            "SP-V1-001",
            category,
            "error",
            f"vLLM {version}'s V1 engine refuses this configuration",
            f"VLLM_USE_V1=1 forbids vLLM {version}'s fallback to the V0 engine, and its V1 engine "
            "does not support "
            f"{value}. The engine will raise while building its configuration: "
            f"NotImplementedError: {message}",
            (
                Evidence("VLLM_USE_V1=1", "environment"),
                Evidence(f"V1 oracle in vLLM {row.versions}: {message}", row.source),
            ),
            (_UNSET_V1,),
        )
    ]


@rule(
    "SP-ATTN-011",
    "attention_backend",
    "The attention backend a pre-0.10 vLLM release picks refuses the model or GPU",
    facts=(
        "vLLM 0.7.x's opt-in V1 engine runs FlashAttention for every model; on compute capability "
        "below 8.0 "
        "0.7.0-0.7.2 fail 'assert is_fa_version_supported(self.fa_version)' while building the "
        "model.",
        "The V0 engine (0.5-0.9) uses FlashAttention-2 on 8.0+ and XFormers otherwise (also for "
        "float32, an fp8 KV "
        "cache, a block size not a multiple of 16, or a head size FlashAttention-2 lacks); "
        "XFormers pages through "
        "PagedAttention, which raises 'Head size H is not supported by PagedAttention' outside "
        "its list.",
        "The V1 engine of 0.8.0-0.9.1 runs FlashAttention on 8.0+, which raises for a head size "
        "it lacks.",
    ),
    sources=(
        KNOWLEDGE,
        "vllm/platforms/cuda.py@v0.7.3 and @v0.8.5 (get_attn_backend_cls)",
        "vllm/attention/selector.py@v0.5.5 (which_attn_to_use)",
        "vllm/attention/backends/xformers.py@v0.6.2 (XFormersImpl.__init__)",
    ),
    engines=("vllm",),
)
def old_backend_refuses(dep, ctx) -> list[Finding]:
    if dep.cluster.platform != "cuda":
        return []
    sel = old_selection(dep, ctx.resolution)
    if not sel.decided or sel.refusal is None:
        return []
    r = sel.refusal
    version = dep.engine_version
    remedies = []
    if sel.engine == "V1" and use_v1_env(dep) is True:
        remedies.append(_UNSET_V1)
    remedies.append(
        Remedy(
            "upgrade",
            "pip install 'vllm>=0.10.0'",
            "a newer release picks among more backends (FlexAttention, Triton) itself",
            {"upgrade": {"package": "vllm", "specifier": ">=0.10.0"}},
        )
    )
    return [
        Finding(
            "SP-ATTN-011",
            r.category,
            "error",
            f"{sel.backend} on vLLM {version}'s {sel.engine} engine refuses this model",
            f"{r.why}. The engine will raise: {r.message}",
            (Evidence(f"vLLM {version}: {sel.engine} engine, {sel.backend}", r.source),),
            tuple(remedies),
        )
    ]


@rule(
    "SP-PP-001",
    "unsupported_arch",
    "Pipeline parallelism only for the architectures vLLM 0.5.1-0.6.2 list",
    facts=(
        "ModelConfig.verify_with_parallel_config of vLLM 0.5.1-0.6.2 raises "
        "NotImplementedError('Pipeline "
        "parallelism is only supported for the following architectures: [...]') for any other "
        "model when "
        "--pipeline-parallel-size > 1, right after the attention-heads/TP check.",
        "From 0.6.3 each model class declares it (SupportsPP); those releases are not modelled "
        "here.",
    ),
    sources=(KNOWLEDGE, "vllm/config.py@v0.5.5 and @v0.6.2 (_PP_SUPPORTED_MODELS)"),
    engines=("vllm",),
    platforms=ANY_PLATFORM,
)
def pp_architecture_list(dep, ctx) -> list[Finding]:
    found = pp_refusal(dep, dep.engine_version)
    if found is None:
        return []
    row, outside = found
    pp = dep.launch.pipeline_parallel_size
    return [
        Finding(
            "SP-PP-001",
            "unsupported_arch",
            "error",
            f"vLLM {dep.engine_version} has no pipeline parallelism for {outside[0]}",
            f"--pipeline-parallel-size {pp} is refused for {', '.join(outside)}: the engine will "
            "raise "
            "NotImplementedError: Pipeline parallelism is only supported for the following  "
            "architectures: "
            f"{list(row.architectures)}.",
            (
                Evidence(
                    f"architectures {list(dep.spec.architectures)}", f"{dep.spec.path}/config.json"
                ),
                Evidence(
                    f"pipeline parallelism in vLLM {row.versions}: {len(row.architectures)} "
                    "architectures",
                    row.source,
                ),
            ),
            (
                Remedy(
                    "flag",
                    "--pipeline-parallel-size 1",
                    "the model must fit the tensor-parallel GPUs alone",
                    {"set": {"pipeline_parallel_size": 1}, "unset": []},
                ),
                Remedy(
                    "upgrade",
                    "pip install 'vllm>=0.6.3'",
                    "later releases let each model class declare pipeline "
                    "parallelism (check that this one does)",
                    {"upgrade": {"package": "vllm", "specifier": ">=0.6.3"}},
                ),
            ),
        )
    ]


@rule(
    "SP-PP-002",
    "quantization_support",
    "bitsandbytes refused with TP/PP (vLLM 0.5.1-0.6.1) or CUDA graphs (0.5.4)",
    facts=(
        "vLLM 0.5.1-0.6.1 refuse a bitsandbytes model with tensor or pipeline parallelism while "
        "building the "
        "engine config: 'BitAndBytes quantization with TP or PP is not supported yet.'",
        "vLLM 0.5.4 also refuses it without --enforce-eager ('BitAndBytes with enforce_eager = "
        "False is not "
        "supported yet.'); 0.5.5-0.6.1 fall back to eager mode with a warning.",
    ),
    sources=(
        KNOWLEDGE,
        "vllm/config.py@v0.5.4 and @v0.6.1 (ModelConfig.verify_with_parallel_config)",
    ),
    engines=("vllm",),
    platforms=ANY_PLATFORM,
)
def bnb_parallel_config(dep, ctx) -> list[Finding]:
    row = bnb_config_refusal(dep, ctx.resolution, dep.engine_version)
    if row is None:
        return []
    launch = dep.launch
    if row.condition == "tp_or_pp":
        what = f"tensor parallel {launch.tensor_parallel_size} x pipeline parallel "
        f"{launch.pipeline_parallel_size}"
        remedy = Remedy(
            "flag",
            "--tensor-parallel-size 1 --pipeline-parallel-size 1",
            "one GPU must hold the 4-bit weights and the KV cache",
            {"set": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1}, "unset": []},
        )
        later = ">=0.6.2"
    else:
        what = "CUDA graphs (no --enforce-eager)"
        remedy = Remedy(
            "flag",
            "--enforce-eager",
            "no CUDA graphs: slower decoding",
            {"set": {"enforce_eager": True}, "unset": []},
        )
        later = ">=0.5.5"
    return [
        Finding(
            "SP-PP-002",
            "quantization_support",
            "error",
            f"vLLM {dep.engine_version} refuses bitsandbytes with {what}",
            f"vLLM {dep.engine_version} checks bitsandbytes against the parallel and graph "
            "settings while building its "
            f"configuration, before any weight is loaded. The engine will raise: {row.message}",
            (
                Evidence(
                    "bitsandbytes quantization",
                    "the checkpoint's quantization_config or --quantization",
                ),
                Evidence(f"vLLM {row.versions}: {row.message}", row.source),
            ),
            (
                remedy,
                Remedy(
                    "upgrade",
                    f"pip install 'vllm{later}'",
                    "a later release lifts this check",
                    {"upgrade": {"package": "vllm", "specifier": later}},
                ),
            ),
        )
    ]


@rule(
    "SP-ATTN-012",
    "attention_backend",
    "LMCache's V0 connector needs the FlashAttention backend (vLLM 0.8-0.9)",
    facts=(
        "vLLM 0.8-0.9's V0 KV connector LMCacheConnector passes each request through LMCache's "
        "vllm_adapter, "
        "which asserts FlashAttention (or MLA) attention metadata: 'Only FlashAttention backend "
        "is supported for "
        "now.'",
        "Where the V0 engine falls back to XFormers (compute capability below 8.0, float32, a "
        "head size "
        "FlashAttention-2 lacks) the server starts and every request fails.",
    ),
    sources=(
        KNOWLEDGE,
        "vllm/distributed/kv_transfer/kv_connector/factory.py@v0.8.0",
        "github.com/LMCache/LMCache lmcache/integration/vllm/vllm_adapter.py@438a2f7",
    ),
    engines=("vllm",),
)
def lmcache_v0_backend(dep, ctx) -> list[Finding]:
    if dep.cluster.platform != "cuda":
        return []
    found = lmcache_v0_refusal(dep, ctx.resolution)
    if found is None:
        return []
    row, sel = found
    return [
        Finding(
            "SP-ATTN-012",
            "attention_backend",
            "error",
            f"LMCacheConnector cannot use vLLM {dep.engine_version}'s {sel.backend} backend",
            f"vLLM {dep.engine_version} runs its V0 engine here and picks {sel.backend}; "
            "LMCache's V0 adapter accepts "
            f"only {', '.join(row.accepted_backends)} attention metadata, so the server starts "
            "and the first request "
            f"fails: {row.message}",
            (
                Evidence(f"--kv-transfer-config kv_connector {row.connector}", "command line"),
                Evidence(f"vLLM {dep.engine_version}: V0 engine, {sel.backend}", sel.source),
                Evidence(
                    f"LMCache's V0 adapter accepts {', '.join(row.accepted_backends)}", row.source
                ),
            ),
            (
                Remedy(
                    "upgrade",
                    "pip install 'vllm>=0.8.5' (LMCacheConnectorV1 on the V1 engine)",
                    "the V1 connector needs compute capability 8.0+ as well",
                    {"upgrade": {"package": "vllm", "specifier": ">=0.8.5"}},
                ),
            ),
        )
    ]


@rule(
    "SP-QUANT-011",
    "quantization_support",
    "bitsandbytes needs a model class that maps it (vLLM 0.5.3-0.6.6)",
    facts=(
        "vLLM 0.5.3-0.6.6's bitsandbytes loader reads the model class's "
        "bitsandbytes_stacked_params_mapping; a "
        "class without it raises 'Model X does not support BitsAndBytes quantization yet.' after "
        "the model is "
        "built and before its weights are placed (pre-quantized and in-flight bitsandbytes alike).",
        "The classes with the mapping were read per release (Qwen2ForCausalLM from 0.6.4, for "
        "example).",
    ),
    sources=(
        KNOWLEDGE,
        "vllm/model_executor/model_loader/loader.py@v0.6.3 and @v0.6.6 (BitsAndBytesModelLoader)",
    ),
    engines=("vllm",),
    platforms=ANY_PLATFORM,
)
def bnb_model_class(dep, ctx) -> list[Finding]:
    found = bnb_model_class_refusal(dep, ctx.resolution)
    if found is None:
        return []
    row, arch = found
    version = dep.engine_version
    # 0.5.3 formats the loader's own class name into the message (type(self))
    named = "BitsAndBytesModelLoader" if "v0.5.3" in row.source else arch
    later = _first_bnb_release(arch)
    remedies = [
        Remedy(
            "flag",
            "drop bitsandbytes (an AWQ or GPTQ checkpoint, or the 16-bit model)",
            "other quantization kernels, or twice to four times the weight memory",
            None,
        )
    ]
    if later:
        remedies.insert(
            0,
            Remedy(
                "upgrade",
                f"pip install 'vllm>={later}'",
                f"{arch} maps bitsandbytes from vLLM {later}",
                {"upgrade": {"package": "vllm", "specifier": f">={later}"}},
            ),
        )
    return [
        Finding(
            "SP-QUANT-011",
            "quantization_support",
            "error",
            f"vLLM {version} cannot load {arch} with bitsandbytes",
            f"vLLM {version}'s bitsandbytes loader has no parameter mapping for {arch}; it builds "
            "the model, then stops "
            f"before placing the weights: AttributeError: Model {named} does not support "
            "BitsAndBytes quantization yet.",
            (
                Evidence(f"architecture {arch}, bitsandbytes", f"{dep.spec.path}/config.json"),
                Evidence(
                    f"bitsandbytes model classes in vLLM {row.versions}: {len(row.architectures)} "
                    "architectures",
                    row.source,
                ),
            ),
            tuple(remedies),
        )
    ]


def _first_bnb_release(arch: str) -> str | None:
    """The first read release whose bitsandbytes loader maps `arch` (the start of its row's
    range)."""
    from servepilot.checks.old_vllm import _file

    for row in _file().bnb_model_classes:
        if arch in row.architectures:
            return str(row.versions).split(",")[0].lstrip(">=")
    return None
