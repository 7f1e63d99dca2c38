"""Quantization method vs GPU: refused below the minimum capability, weight-only Marlin below native."""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule
from servepilot.checks.rules.group_alignment import experts_fallback_row

KNOWLEDGE = "servepilot/engines/vllm/knowledge/quantization.yaml"


# where each engine checks the minimum: vLLM's config, SGLang's model loader
_REFUSES = {"vllm": "vLLM will raise",
            "sglang": "SGLang refuses it while building the model (before the weights)"}


@rule(
    "SP-QUANT-001", "quantization_support", "Quantization method not supported on this GPU",
    facts=("vLLM refuses a quantization method below its get_min_capability(): 'The quantization method X is not "
           "supported for the current GPU. Minimum capability: N. Current capability: M.'",
           "Examples: AWQ needs 7.5, ModelOpt FP8 needs 8.9, Marlin variants 7.5 (8.0 before "
           "0.14), mxfp4 8.0.",
           "SGLang's loader raises the same message from its own configs' minimums (per release: "
           "ModelOpt NVFP4 10.0 before 0.5.13, 8.0 from it; w8a8_fp8 8.9; AWQ 7.5; GPTQ 6.0)."),
    sources=(KNOWLEDGE, "vllm/config/vllm.py@v0.16.0 (VllmConfig._get_quantization_config)",
             "servepilot/engines/sglang/knowledge/quantization.yaml",
             "sglang/srt/model_loader/loader.py@v0.4.1.post7 and @v0.5.23 "
             "(_get_quantization_config)"),
    engines=(),
)
def quant_unsupported(dep, ctx) -> list[Finding]:
    q = ctx.resolution.quant
    if q is None or q.supported:
        return []
    gpu = dep.cluster.gpus[0].name if dep.cluster.gpus else "this GPU"
    return [Finding("SP-QUANT-001", "quantization_support", "error", f"{q.method} needs compute capability "
                                                                     f"{q.min_cc / 10:.1f}+",
                    f"{gpu} is below the method's minimum. "
                    f"{_REFUSES.get(dep.engine, 'The engine will raise')}: {q.error}",
                    (Evidence(f"{q.method}: minimum capability {q.min_cc}", q.source),),
                    (Remedy("hardware", f"GPUs with compute capability >= {q.min_cc / 10:.1f}", "different hardware",
                            {"hardware": {"min_compute_capability": f"{q.min_cc / 10:.1f}"}}),
                     Remedy("overlay", "a checkpoint in another format (e.g. GPTQ or GGUF) of the same model",
                            "another download; quality may differ", None)))]


@rule(
    "SP-QUANT-002", "quantization_support", "Quantized weights fall back to weight-only Marlin kernels",
    facts=("Below the native capability (FP8 W8A8 8.9; NVFP4 W4A4 families 10.x/12.x; MoE NVFP4 on SM90 too) vLLM runs "
           "the weights through Marlin weight-only kernels with 16-bit activations.",
           "Memory stays as small as the checkpoint; the matrix multiplications run at 16-bit tensor-core rates (FP8 "
           "is 2x, FP4 4x BF16 peak)."),
    sources=(KNOWLEDGE, "vllm/model_executor/layers/quantization/utils/nvfp4_utils.py@v0.16.0",
             "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py@v0.16.0",
             "vllm/model_executor/layers/quantization/fp8.py@v0.16.0"),
    engines=(),
)
def quant_fallback(dep, ctx) -> list[Finding]:
    res = ctx.resolution
    q = res.quant
    if q is None or not q.supported or not q.fallback:
        return []
    speed = res.release.quant_speed  # hardware ratios, not engine facts
    ratio = speed.fp4_over_bf16 if "fp4" in q.method or "mxfp4" in q.method else speed.fp8_over_bf16
    parts = [f"linear: {q.linear}"] + ([f"MoE experts: {q.moe}"] if q.moe else [])
    # MXFP4 experts are re-laid for Marlin with their sizes padded (mxfp4_moe_padding: x1.09
    # for gpt-oss); the other methods keep the checkpoint's size
    memory = ("memory grows by the experts' Marlin padding (the plan counts it)"
              if q.method == "mxfp4" else "memory is unchanged")
    native_cc = f"{(q.native_min_cc or 0) / 10:.1f}"
    remedies = [Remedy(
        "hardware",
        f"GPUs with native {q.method} kernels (compute capability >= {native_cc})",
        f"up to {ratio}x faster matmuls",
        {"hardware": {"min_compute_capability": native_cc}},
    )]
    later = q.native_from
    if later:
        remedies.insert(0, Remedy(
            "upgrade", f"pip install 'vllm>={later}'",
            f"vLLM {later} runs {q.method} on compute capability {res.gpu_cc[0]}.{res.gpu_cc[1]} "
            "without the weight-only Marlin fallback; a new engine release to install and validate",
            {"upgrade": {"package": "vllm", "specifier": f">={later}"}}))
    findings = [
        Finding(
            "SP-QUANT-002",
            "quantization_support",
            "warning",
            f"{q.method} runs weight-only (Marlin) on compute capability {res.gpu_cc[0]}.{res.gpu_cc[1]}",
            f"No native {q.method} kernel for this GPU ({'; '.join(parts)}). The launch works and "
            f"{memory}, but activations stay 16-bit: up to {ratio}x less peak tensor-core "
            "throughput than the native path, "
            "mostly felt in prefill and large batches (decode is bandwidth-bound).",
            (
                Evidence(f"{q.method}: native from capability {q.native_min_cc}", q.source),
                Evidence(f"low-precision peak is {ratio}x BF16", speed.source),
            ),
            tuple(remedies),
        )
    ]
    return findings


# vllm/model_executor/layers/quantization/utils/marlin_utils.py@v0.16.0
MARLIN_MIN_THREAD_N = 64  # GPTQ_MARLIN_MIN_THREAD_N: output columns per partition
MARLIN_MIN_THREAD_K = 128  # GPTQ_MARLIN_MIN_THREAD_K: input rows per partition


@rule(
    "SP-QUANT-004", "tp_divisibility",
    "Marlin kernels cannot split these layers over this many GPUs",
    facts=("Marlin needs every partition's output size divisible by 64 and input size by 128 and "
           "by the group size: 'Weight input_size_per_partition = N is not divisible by "
           "group_size = G. Consider reducing tensor_parallel_size'.",
           "The MLP (and expert) intermediate size is split by tensor parallel: the merged "
           "gate/up projection's output (2 x intermediate_size / tp) and the down projection's "
           "input (intermediate_size / tp) must meet them.",
           "GPTQ and AWQ checkpoints run on Marlin when the GPU allows it; compressed-tensors "
           "W4A16/W8A16 ran on Marlin alone before vLLM 0.6 (later releases choose among "
           "several kernels, not modelled here)."),
    sources=("vllm/model_executor/layers/quantization/utils/marlin_utils.py@v0.16.0 "
             "(verify_marlin_supports_shape)",
             "vllm/model_executor/layers/quantization/compressed_tensors/schemes/"
             "compressed_tensors_wNa16.py@v0.5.5",
             KNOWLEDGE),
    engines=("vllm",),
)
def marlin_shape(dep, ctx) -> list[Finding]:
    q = ctx.resolution.quant
    spec = dep.spec
    if q is None or spec is None or spec.quant is None or not _runs_on_marlin(dep, q.method):
        return []
    tp = sizes.tp(dep.launch)
    # GPTQ/AWQ write their group size (128 when left out); -1, or a compressed-tensors group
    # without group_size, is channel-wise: one scale per output column, no group to divide by
    default = 0 if q.method == "compressed-tensors" else 128
    group = max(spec.quant.group_size or default, 0)
    expert = whole_expert = spec.moe.expert_intermediate_size if spec.moe else None
    problems = []
    if expert and q.method in ("gptq_marlin", "awq_marlin") and experts_fallback_row(dep):
        expert = None  # experts Marlin cannot tile run on MoE WNA16 (SP-QUANT-007's case)
    # (name, size, output factor): the dense MLP's gate and up projections are one merged layer
    # whose partition output is their sum (create_weights: sum(output_partition_sizes))
    for name, size, out_factor in (("intermediate_size", _dense_width(spec), 2),
                                   ("moe_intermediate_size", expert, 1)):
        if not size or tp <= 1:
            continue
        part = size // tp
        where = f"({name} {size} / tp {tp})"
        if size % tp:
            problems.append(f"{name} {size} does not divide by tensor parallel size {tp}")
        elif (out_factor * part) % MARLIN_MIN_THREAD_N:
            problems.append(f"Weight output_size_per_partition = {out_factor * part} is not "
                            f"divisible by min_thread_n = {MARLIN_MIN_THREAD_N} {where}")
        elif part % MARLIN_MIN_THREAD_K:
            problems.append(f"Weight input_size_per_partition = {part} is not divisible by "
                            f"min_thread_k = {MARLIN_MIN_THREAD_K} {where}")
        elif 0 < group < size and part % group:
            problems.append(f"Weight input_size_per_partition = {part} is not divisible by "
                            f"group_size = {group} {where}")
    if not problems:
        return []
    return [Finding("SP-QUANT-004", "tp_divisibility", "error",
                    f"{q.method} cannot split the MLP over {tp} GPUs", "\n".join(problems),
                    tuple(_marlin_evidence(dep, q.method)),
                    tuple(_marlin_remedies(spec, q.method, tp, group, whole_expert)))]


def _marlin_remedies(spec, method: str, tp: int, group: int, expert) -> list[Remedy]:
    def fits(d: int) -> bool:
        return all(not s or (s % d == 0 and (s // d) % MARLIN_MIN_THREAD_K == 0
                             and (not group or (s // d) % group == 0))
                   for s in (_dense_width(spec), expert))

    good = [d for d in range(tp - 1, 0, -1) if fits(d)]
    out = [Remedy("flag", f"--tensor-parallel-size {good[0]}", "fewer GPUs per replica",
                  {"set": {"tensor_parallel_size": good[0]}, "unset": []})] if good else []
    if method != "compressed-tensors":  # gptq / awq have non-Marlin kernels to fall back to
        plain = method.removesuffix("_marlin")
        out.append(Remedy("flag", f"--quantization {plain}",
                          "the non-Marlin kernels have no such limit but are slower",
                          {"set": {"quantization": plain}, "unset": []}))
    else:
        out.append(Remedy("upgrade", "pip install 'vllm>=0.6.6'",
                          "a release that picks another kernel when Marlin cannot tile the layer",
                          {"upgrade": {"package": "vllm", "specifier": ">=0.6.6"}}))
    return out


def _dense_width(spec) -> int | None:
    """The dense MLP width the model builds: intermediate_size only when some decoder layer
    has a dense MLP (an all-MoE model such as Qwen3-30B-A3B builds none)."""
    if not spec.layers:
        return spec.intermediate_size
    return next((layer.mlp_intermediate for layer in spec.layers
                 if layer.mlp == "dense" and layer.mlp_intermediate), None)


def _marlin_evidence(dep, method: str) -> list[Evidence]:
    spec = dep.spec
    out = [Evidence(f"group_size = {spec.quant.group_size}", f"{spec.path}/config.json"),
           Evidence("Marlin min_thread_n 64, min_thread_k 128",
                    "vllm/model_executor/layers/quantization/utils/marlin_utils.py@v0.16.0")]
    if method == "compressed-tensors":
        out.append(Evidence(f"compressed-tensors {spec.quant.quant_algo} runs on Marlin only in "
                            f"vLLM {dep.engine_version}", _wna16_row(dep).source))
    return out


def _wna16_row(dep):
    from servepilot.engines.vllm.release import ct_wna16_kernel

    return ct_wna16_kernel(dep.engine_version) if dep.engine_version else None


def _runs_on_marlin(dep, method: str) -> bool:
    """GPTQ/AWQ upgraded to Marlin; a compressed-tensors weight-only integer scheme where the
    release has no other kernel for it."""
    if method == "awq_marlin":
        # from 0.7.3 a layer Marlin cannot tile runs on the AWQ kernels (SP-QUANT-006's case)
        from servepilot.engines.vllm.release import group_alignment

        version = dep.engine_version
        row = group_alignment(version) if version else None
        return row is None or not row.awq_marlin_falls_back
    if method == "gptq_marlin":
        return True
    scheme = dep.spec.quant.quant_algo or ""
    if method != "compressed-tensors" or scheme not in ("W4A16", "W8A16"):
        return False
    row = _wna16_row(dep)
    return row is not None and row.value == "marlin_only"


# --dtype auto on a bf16 checkpoint below compute capability 8.0: vLLM before the fallback kept
# bfloat16 and the worker refused it; https://github.com/vllm-project/vllm/pull/17265 (merged
# 2025-04-27, the eve of 0.8.5's release) made auto fall back to float16. 0.8.5.x is not
# verified either way: a warning says so. The fallback is in vllm/config/model.py@v0.12.0.
_AUTO_BF16_REFUSED = "<0.8.5"
_AUTO_BF16_UNVERIFIED = ">=0.8.5,<0.9"


@rule(
    "SP-DTYPE-001", "cuda_driver_arch", "bfloat16 on a GPU without bfloat16",
    facts=("Below compute capability 8.0 vLLM serves a bf16 checkpoint in float16 when --dtype is auto (a warning), "
           "and refuses an explicit --dtype bfloat16: 'Bfloat16 is only supported on GPUs with compute capability of "
           "at least 8.0'.",
           "vLLM < 0.8.5 had no such fallback: --dtype auto kept a bf16 checkpoint's bfloat16 and start-up stopped "
           "with the same error (PR 17265)."),
    sources=("vllm/platforms/cuda.py@v0.16.0 (supported_dtypes, check_if_supports_dtype)",
             "vllm/config/model.py@v0.16.0 (_resolve_auto_dtype)",
             "https://github.com/vllm-project/vllm/pull/17265", "vllm/worker/worker.py@v0.6.3 "
                                                                "(_check_if_gpu_supports_dtype)"),
    engines=("vllm",),
)
def bfloat16_gpu(dep, ctx) -> list[Finding]:
    res = ctx.resolution
    if res.gpu_cc is None or res.gpu_cc >= (8, 0) or dep.spec is None:
        return []
    explicit = str(dep.launch.get("dtype") or "auto")
    era = _auto_bf16_era(dep.engine_version) if explicit == "auto" and dep.spec.dtype == "bfloat16" else None
    if era == "refused":
        return [Finding("SP-DTYPE-001", "cuda_driver_arch", "error",
                        f"vLLM {dep.engine_version} keeps the bf16 checkpoint in bfloat16, which compute capability "
                        f"{res.gpu_cc[0]}.{res.gpu_cc[1]} lacks",
                        "Before the float16 fallback (vLLM 0.8.5) --dtype auto keeps the checkpoint's bfloat16 and the "
                        "worker raises: "
                        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0.",
                        (Evidence("config dtype bfloat16", f"{dep.spec.path}/config.json"),
                         Evidence("auto falls back to float16 only from vLLM 0.8.5",
                                  "https://github.com/vllm-project/vllm/pull/17265")),
                        (Remedy("flag", "--dtype half",
                                "float16 has a smaller range than bfloat16: some models overflow (inf/NaN)",
                                {"set": {"dtype": "half"}, "unset": []}),))]
    if era == "unverified":
        return [Finding("SP-DTYPE-001", "cuda_driver_arch", "warning",
                        f"vLLM {dep.engine_version} may keep the bf16 checkpoint in bfloat16 on compute capability "
                        f"{res.gpu_cc[0]}.{res.gpu_cc[1]}",
                        "The float16 fallback for --dtype auto was merged as 0.8.5 was released; whether this release "
                        "has it is not verified. "
                        "Pass --dtype half to be sure.",
                        (Evidence("auto falls back to float16 from PR 17265",
                                  "https://github.com/vllm-project/vllm/pull/17265"),),
                        (Remedy("flag", "--dtype half",
                                "float16 has a smaller range than bfloat16: some models overflow (inf/NaN)",
                                {"set": {"dtype": "half"}, "unset": []}),))]
    if explicit in ("bfloat16", "bf16"):
        return [Finding("SP-DTYPE-001", "cuda_driver_arch", "error", "--dtype bfloat16 on compute capability "
                                                                     f"{res.gpu_cc[0]}.{res.gpu_cc[1]}",
                        "The worker will raise: Bfloat16 is only supported on GPUs with compute capability of at least "
                        "8.0.",
                        (Evidence("bfloat16 needs compute capability 8.0", "vllm/platforms/cuda.py@v0.16.0"),),
                        (Remedy("flag", "--dtype half",
                                "float16 has a smaller range than bfloat16: some models overflow (inf/NaN)",
                                {"set": {"dtype": "half"}, "unset": []}),))]
    if explicit == "auto" and dep.spec.dtype == "bfloat16":
        return [Finding("SP-DTYPE-001", "cuda_driver_arch", "info", "the bf16 checkpoint will run in float16",
                        f"Compute capability {res.gpu_cc[0]}.{res.gpu_cc[1]} has no bfloat16: vLLM falls back to "
                        "float16. Models trained in bf16 can overflow in fp16.",
                        (Evidence("config dtype bfloat16",
                                  f"{dep.spec.path}/config.json"),
                         Evidence("supported dtypes below 8.0: float16, float32",
                                  "vllm/platforms/cuda.py@v0.16.0")), ())]
    return []


def _auto_bf16_era(version: str | None) -> str | None:
    """'refused' / 'unverified' / None (falls back to float16, or the version is not given)."""
    if version is None:
        return None
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        v = Version(version)
    except InvalidVersion:
        return None
    if v in SpecifierSet(_AUTO_BF16_REFUSED, prereleases=True):
        return "refused"
    if v in SpecifierSet(_AUTO_BF16_UNVERIFIED, prereleases=True):
        return "unverified"
    return None
