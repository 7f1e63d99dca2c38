"""Block-quantized FP8 MoE checkpoints against the tensor parallel size: whole blocks per rank."""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import ANY_PLATFORM, rule

SOURCES = (
    "servepilot/engines/vllm/knowledge/quantization.yaml",
    "servepilot/engines/sglang/knowledge/quantization.yaml",
)


def moe_ranks(dep) -> int | None:
    """How many ranks split each routed expert's intermediate size; None when not modelled."""
    launch = dep.launch
    tp = sizes.tp(launch)
    if dep.engine == "sglang":
        opts = launch.options
        if (
            opts.get("enable_ep_moe")
            or opts.get("enable_deepep_moe")
            or str(opts.get("moe_a2a_backend") or "none") != "none"
        ):
            return 1  # these switches set ep_size = tp_size: experts placed whole
        ep = max(1, launch.expert_parallel_size)
        return max(1, tp // ep)  # SGLang's moe_tp_size
    if launch.expert_parallel:
        return 1  # vLLM: experts placed whole on the tp x dp ranks
    if sizes.dp(launch) > 1:
        return (
            None  # data parallel without EP: how vLLM splits the experts then is not modelled here
        )
    return tp


@rule(
    "SP-TP-004",
    "tp_divisibility",
    "FP8 block size does not divide the experts' slice per rank",
    facts=(
        "A block-quantized FP8 checkpoint (weight_block_size [128, 128]) stores one scale per "
        "block; vLLM (0.6.6+) "
        "and SGLang (0.4.1+) raise \"The output_size of gate's and up's weight = N is not "
        "divisible by weight "
        "quantization block_n = 128\" when a rank's slice of the routed experts' intermediate "
        "size is not whole "
        "blocks.",
        "The slice is moe_intermediate_size / tp (SGLang: tp / ep_size ranks); vLLM's "
        "--enable-expert-parallel and "
        "SGLang's --ep-size place experts whole instead.",
    ),
    sources=SOURCES,
    engines=("vllm", "sglang"), platforms=ANY_PLATFORM,
)
def fp8_block_moe(dep, ctx) -> list[Finding]:
    from servepilot.engines.sglang import release as sglang_release
    from servepilot.engines.vllm import release as vllm_release

    spec = dep.spec
    quant = spec.quant if spec is not None else None
    if (
        spec is None
        or not spec.is_moe
        or quant is None
        or quant.method != "fp8"
        or not quant.weight_block_size
    ):
        return []
    inter = spec.moe.expert_intermediate_size
    ranks = moe_ranks(dep)
    version = dep.engine_version or ctx.resolution.engine_version
    if not inter or not ranks or ranks <= 1 or inter % ranks or not version:
        return []
    row = (vllm_release if dep.engine == "vllm" else sglang_release).fp8_block_moe(version)
    if row is None:
        return []
    block_n, block_k = (list(quant.weight_block_size) + [quant.weight_block_size[0]])[:2]
    per = inter // ranks
    if per % block_n == 0 and per % block_k == 0:
        return []
    fits = [
        t
        for t in (8, 4, 2, 1)
        if t < ranks
        and inter % t == 0
        and (inter // t) % block_n == 0
        and (inter // t) % block_k == 0
    ]
    ep_flag = (
        "--enable-expert-parallel" if dep.engine == "vllm" else f"--ep-size {sizes.tp(dep.launch)}"
    )
    ep_set = (
        {"enable_expert_parallel": True}
        if dep.engine == "vllm"
        else {"ep_size": sizes.tp(dep.launch)}
    )
    remedies = [
        Remedy(
            "flag",
            ep_flag,
            "experts placed whole on each rank instead of split; all-to-all traffic between ranks",
            {"set": ep_set, "unset": []},
        )
    ]
    remedies += [
        Remedy(
            "flag",
            f"--tensor-parallel-size {t}",
            f"{t} GPUs hold the model instead of {ranks}",
            {"set": {"tensor_parallel_size": t}, "unset": []},
        )
        for t in fits[:1]
    ]
    return [
        Finding(
            "SP-TP-004",
            "tp_divisibility",
            "error",
            f"{inter} expert intermediate size over {ranks} ranks leaves {per}, not whole "
            f"{block_n}-wide FP8 blocks",
            f"The checkpoint quantizes weights in {block_n}x{block_k} FP8 blocks; split over "
            f"{ranks} ranks each routed "
            f"expert keeps {per} columns. {dep.engine} {version} will raise while creating the "
            "expert weights: " + row.message.format(per=per, block_n=block_n),
            (
                Evidence(
                    f"moe_intermediate_size = {inter}, weight_block_size = "
                    f"{list(quant.weight_block_size)}",
                    f"{spec.path}/config.json",
                ),
                Evidence(f"{ranks} ranks split the experts", "command line"),
                Evidence("whole blocks per rank", row.source),
            ),
            tuple(remedies),
        )
    ]
