"""Tensor, pipeline and expert parallel sizes against the model and the GPUs."""

from __future__ import annotations

from servepilot.checks import sizes
from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import ANY_PLATFORM, rule

SOURCE = "vllm/config/model.py@v0.16.0 (ModelConfig.verify_with_parallel_config, get_num_kv_heads)"


def _kv_ok(spec, tp: int) -> bool:
    """vLLM's KV head rule: replicate when tp > kv_heads (tp % kv == 0), else split (kv % tp == 0)."""
    kv = spec.attention.num_kv_heads
    if spec.is_mla or not kv:
        return True
    return tp % kv == 0 if tp > kv else kv % tp == 0


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


@rule(
    "SP-TP-001", "tp_divisibility", "Tensor parallel size does not divide the attention heads",
    facts=("vLLM: 'Total number of attention heads (H) must be divisible by tensor parallel size (T).'",
           "KV heads: with tp > kv_heads vLLM replicates each KV head (tp must be a multiple of kv_heads); with tp < "
           "kv_heads, kv_heads must be divisible by tp.",
           "MLA models keep one latent KV per token; heads only need to divide by tp."),
    sources=(SOURCE,), platforms=ANY_PLATFORM,
)
def tp_heads(dep, ctx) -> list[Finding]:
    spec = dep.spec
    tp = sizes.tp(dep.launch)
    if spec is None or spec.attention is None or tp <= 1:
        return []
    a = spec.attention
    where = f"{spec.path}/config.json"
    gpus = dep.cluster.count or 8
    out = []
    if a.num_heads % tp:
        good = [d for d in _divisors(a.num_heads, max(gpus, tp)) if d > 1 and _kv_ok(spec, d)]
        remedies = [Remedy("flag", f"--tensor-parallel-size {d}", f"{d} GPUs hold the model instead of {tp}: less "
                                                                  "memory in total for weights and KV cache",
                           {"set": {"tensor_parallel_size": d}, "unset": []}) for d in sorted(good, reverse=True)[:2]]
        if good and tp % max(good) == 0:
            t2 = max(good)
            remedies.append(Remedy("flag", f"--tensor-parallel-size {t2} --pipeline-parallel-size {tp // t2}",
                                   "pipeline stages add latency per token",
                                   {"set": {"tensor_parallel_size": t2,
                                            "pipeline_parallel_size": tp // t2}, "unset": []}))
        out.append(Finding("SP-TP-001", "tp_divisibility", "error", f"{a.num_heads} attention heads do not divide by "
                                                                    f"tensor parallel size {tp}",
                           f"The engine will raise: Total number of attention heads ({a.num_heads}) must be divisible "
                           f"by tensor parallel size ({tp}). "
                           f"Sizes that work for heads and KV heads: {', '.join(map(str, good)) or '1'}.",
                           (Evidence(f"num_attention_heads = {a.num_heads}",
                                     where), Evidence("heads are split evenly across TP ranks", SOURCE)),
                           tuple(remedies)))
    return out


@rule("SP-TP-002", "tp_divisibility", "Tensor parallel size and KV heads",
      facts=("tp > kv_heads: KV heads are replicated and tp must be a multiple of kv_heads; tp < kv_heads: kv_heads % "
             "tp == 0.",),
      sources=(SOURCE,), platforms=ANY_PLATFORM)
def tp_kv_heads(dep, ctx) -> list[Finding]:
    spec = dep.spec
    tp = sizes.tp(dep.launch)
    if spec is None or spec.attention is None or tp <= 1 or spec.attention.num_heads % tp:
        return []
    a = spec.attention
    where = f"{spec.path}/config.json"
    out = []
    if not spec.is_mla and a.num_kv_heads:
        kv = a.num_kv_heads
        if tp > kv and tp % kv:
            out.append(Finding("SP-TP-002", "tp_divisibility", "error", f"tensor parallel size {tp} is not a multiple "
                                                                        f"of {kv} KV heads",
                               "With more ranks than KV heads vLLM replicates each KV head, which needs tp % kv_heads "
                               f"== 0 ({tp} % {kv} = {tp % kv}).",
                               (Evidence(f"num_key_value_heads = {kv}",
                                         where), Evidence("KV heads replicated when tp > kv_heads", SOURCE)), ()))
        elif tp < kv and kv % tp:
            out.append(Finding("SP-TP-002", "tp_divisibility", "error", f"{kv} KV heads do not divide by tensor "
                                                                        f"parallel size {tp}",
                               f"vLLM splits KV heads across ranks: {kv} % {tp} = {kv % tp}.",
                               (Evidence(f"num_key_value_heads = {kv}",
                                         where), Evidence("KV heads split across TP ranks", SOURCE)), ()))
        elif tp > kv:
            out.append(Finding("SP-TP-002", "tp_divisibility", "info", f"KV heads replicated {tp // kv}x",
                               f"{kv} KV heads on {tp} ranks: each rank stores a full copy of one KV head, so KV "
                               f"memory per token per GPU does not shrink beyond tp = {kv}.",
                               (Evidence(f"num_key_value_heads = {kv}",
                                         where),
                                Evidence("num_kv_heads per rank = max(1, kv_heads // tp)", SOURCE)), ()))
    return out


@rule(
    "SP-TP-003", "tp_divisibility", "Parallel layout needs more GPUs than there are",
    facts=("world size = tensor x pipeline x data parallel; each rank needs its own GPU on a single node.",),
    sources=("vllm/config/parallel.py@v0.16.0 (ParallelConfig.world_size)",), platforms=ANY_PLATFORM,
)
def world_size(dep, ctx) -> list[Finding]:
    launch = dep.launch
    need = sizes.tp(launch) * sizes.pp(launch) * sizes.dp(launch)
    have = dep.cluster.count
    if not have or need <= have or dep.cluster.source == "none":
        return []
    return [Finding("SP-TP-003", "nccl_distributed", "error", f"{need} ranks need {need} GPUs; {have} available",
                    f"tensor {sizes.tp(launch)} x pipeline {sizes.pp(launch)} x data {sizes.dp(launch)} = {need} GPUs, "
                    f"but the machine has {have}.",
                    (Evidence(f"{have} GPUs", f"cluster ({dep.cluster.source})"),),
                    (Remedy("flag", f"--tensor-parallel-size {have}", "fewer ranks",
                            {"set": {"tensor_parallel_size": have}, "unset": []}),))]


@rule(
    "SP-EP-001", "tp_divisibility", "Expert parallel settings that do not fit the model",
    facts=("--enable-expert-parallel spreads the routed experts over tp x dp ranks; on a dense model it has no effect.",
           "With more ranks than routed experts some ranks would hold no expert."),
    sources=("vllm/model_executor/layers/fused_moe/layer.py@v0.16.0 (determine_expert_map)",), platforms=ANY_PLATFORM,
)
def expert_parallel(dep, ctx) -> list[Finding]:
    launch = dep.launch
    if not launch.get("enable_expert_parallel") or dep.spec is None:
        return []
    ep = sizes.tp(launch) * sizes.dp(launch)
    if not dep.spec.is_moe:
        return [Finding("SP-EP-001", "tp_divisibility", "warning", "expert parallel on a dense model",
                        "--enable-expert-parallel has no effect: the model has no routed experts.",
                        (Evidence("no num_experts / n_routed_experts in config", f"{dep.spec.path}/config.json"),),
                        (Remedy("flag", "drop --enable-expert-parallel", "none",
                                {"set": {}, "unset": ["enable_expert_parallel"]}),))]
    experts = dep.spec.moe.num_experts
    if ep > experts:
        return [Finding("SP-EP-001", "tp_divisibility", "error", f"expert parallel size {ep} exceeds {experts} routed "
                                                                 "experts",
                        f"tp x dp = {ep} ranks but only {experts} experts to place.",
                        (Evidence(f"{experts} routed experts", f"{dep.spec.path}/config.json"),), ())]
    if experts % ep:
        return [Finding("SP-EP-001", "tp_divisibility", "info", f"{experts} experts over {ep} ranks is uneven",
                        f"{experts} % {ep} = {experts % ep}: some ranks hold one more expert, so their memory and time "
                        "per token are higher.",
                        (Evidence(f"{experts} routed experts", f"{dep.spec.path}/config.json"),), ())]
    return []
