"""vLLM 0.20's default unquantized MoE kernel on Blackwell needs whole 128-wide blocks per rank."""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/vllm/knowledge/quantization.yaml"


@rule(
    "SP-MOE-001",
    "tp_divisibility",
    "FlashInfer TRTLLM BF16 MoE needs 128-wide expert blocks",
    facts=(
        "vLLM 0.20.0 runs unquantized SiLU-gated MoE on compute capability 10.x with FlashInfer's "
        "TRTLLM BF16 kernel first (DeepSeekV3, Llama4 or Renormalize routing).",
        "Its weight preparation re-lays each expert's down projection in blocks of 128 along the "
        "expert intermediate size per rank: moe_intermediate_size / tp (the whole size with "
        "expert parallelism) must be a multiple of 128, or FlashInfer asserts 'K must be "
        "divisible by blockK' before serving.",
        "The kernel is not taken with EPLB, nor with all-to-all kernels (data parallel with "
        "expert parallel) other than allgather_reducescatter.",
    ),
    sources=(
        KNOWLEDGE,
        "vllm/model_executor/layers/fused_moe/oracle/unquantized.py@v0.20.0 "
        "(_get_priority_backends, select_unquantized_moe_backend)",
        "vllm/model_executor/layers/fused_moe/experts/trtllm_bf16_moe.py@v0.20.0 "
        "(_supports_parallel_config)",
        "vllm/model_executor/layers/quantization/utils/flashinfer_utils.py@v0.20.0 "
        "(convert_moe_weights_to_flashinfer_trtllm_block_layout: block_k = 128)",
        "vllm/model_executor/layers/fused_moe/config.py@v0.20.0 (use_all2all_kernels)",
    ),
    engines=("vllm",),
)
def trtllm_bf16_moe_blocks(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.release import unquantized_moe_trtllm_block

    spec = dep.spec
    res = ctx.resolution
    version = dep.engine_version
    if (
        spec is None
        or spec.moe is None
        or spec.quant is not None
        or not version
        or res.gpu_cc is None
    ):
        return []
    row = unquantized_moe_trtllm_block(version)
    size = spec.moe.expert_intermediate_size
    if row is None or res.gpu_cc[0] != 10 or not size or not _takes_trtllm(dep, spec):
        return []
    if not _parallel_config_supported(dep):
        return []  # the kernel refuses this parallel setup: another MoE backend is chosen
    ep = bool(dep.launch.get("enable_expert_parallel"))
    tp = sizes.tp(dep.launch)
    per_rank = size if ep else size // tp
    if per_rank % row.block_k == 0:
        return []
    good = [d for d in (8, 4, 2, 1) if d < tp and (size // d) % row.block_k == 0 and size % d == 0]
    remedies = [
        Remedy(
            "env",
            "VLLM_USE_FLASHINFER_MOE_FP16=0",
            "the Triton MoE kernel instead of FlashInfer's TRTLLM one",
            {"env": {"set": {"VLLM_USE_FLASHINFER_MOE_FP16": "0"}, "unset": []}},
        )
    ]
    if not ep and size % row.block_k == 0:
        remedies.append(
            Remedy(
                "flag",
                "--enable-expert-parallel",
                "whole experts per GPU instead of slices; uneven load across GPUs",
                {"set": {"enable_expert_parallel": True}, "unset": []},
            )
        )
    if good and not ep:
        remedies.append(
            Remedy(
                "flag",
                f"--tensor-parallel-size {good[0]}",
                "fewer GPUs per replica",
                {"set": {"tensor_parallel_size": good[0]}, "unset": []},
            )
        )
    where = "whole experts (expert parallel)" if ep else f"{size} / tp {tp}"
    return [
        Finding(
            "SP-MOE-001",
            "tp_divisibility",
            "error",
            f"expert slices of {per_rank} columns are not whole 128-wide blocks",
            f"vLLM {version} runs this unquantized MoE on FlashInfer's TRTLLM BF16 kernel on "
            f"compute capability {res.gpu_cc[0]}.{res.gpu_cc[1]}; preparing its weights re-lays "
            f"each expert's down projection in blocks of {row.block_k} along the {per_rank} "
            f"intermediate columns each rank holds ({where}). FlashInfer will assert: K must be "
            "divisible by blockK.",
            (
                Evidence(f"moe_intermediate_size {size}", f"{spec.path}/config.json"),
                Evidence(f"TRTLLM BF16 MoE first, block_k {row.block_k}", row.source),
            ),
            tuple(remedies),
        )
    ]


def _takes_trtllm(dep, spec) -> bool:
    """The 0.20.0 oracle keeps FlashInfer TRTLLM: not turned off, no LoRA, no explicit backend,
    SiLU-gated experts and a routing method the kernel lists."""
    env = dep.launch.shell.env or {}
    if str(env.get("VLLM_USE_FLASHINFER_MOE_FP16", "")).strip().lower() in ("0", "false"):
        return False
    if dep.launch.get("enable_lora") or dep.launch.get("moe_backend") not in (None, "auto"):
        return False
    cfg = spec.text_config or spec.config or {}
    if str(cfg.get("hidden_act") or "silu") != "silu":
        return False
    return _routing(cfg) in ("Renormalize", "DeepSeekV3", "Llama4")


def _parallel_config_supported(dep) -> bool:
    """TrtLlmBf16Experts._supports_parallel_config@v0.20.0: no EPLB, and all-to-all kernels
    (data parallel > 1 with expert parallel, FusedMoEParallelConfig.use_all2all_kernels) only
    with the allgather_reducescatter backend. 0.20.0's default backend was not read (its
    config/parallel.py is not in the extract): left to the default, no claim."""
    launch = dep.launch
    if launch.get("enable_eplb"):
        return False
    ep = bool(launch.get("enable_expert_parallel"))
    if not (ep and (launch.data_parallel_size or 1) > 1):
        return True  # no all-to-all kernels
    return launch.get("all2all_backend") == "allgather_reducescatter"


def _routing(cfg: dict) -> str:
    """get_routing_method_type@v0.20.0 from the config's router keys."""
    scoring = cfg.get("scoring_func") or "softmax"
    if cfg.get("topk_method") == "noaux_tc":  # e_score_correction_bias
        return (
            "DeepSeekV3"
            if scoring == "sigmoid" and (cfg.get("n_group") or 0) > 0
            else "Unspecified"
        )
    if scoring == "sigmoid":
        return "Llama4" if cfg.get("num_experts_per_tok") == 1 else "Unspecified"
    renormalize = cfg.get("norm_topk_prob", cfg.get("model_type") == "mixtral")
    return "Renormalize" if renormalize else "Default"
