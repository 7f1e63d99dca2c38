"""Version-dependent vLLM rules: MLA cache layout, V1 batch defaults per usage context, V0
chunked-prefill budget and the V0 cap for interleaved sliding windows.

Every expected figure is computed here from the rule (source in vllm_memory.yaml), not copied
from the planner.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from planning_builders import GiB, deepseek_v3, deployment, gpus, llama_70b, no_resolver  # noqa: F401

from servepilot.checkpoint.spec import AttentionSpec, ModelSpec
from servepilot.errors import BadInput
from servepilot.planning import plan_deployment
from servepilot.planning.kv import kv_bytes_per_token_per_layer

H100 = dict(name="NVIDIA H100 80GB HBM3", key="h100-80gb", mib=81559, cc=(9, 0))
A100 = dict(name="NVIDIA A100 80GB", key="a100-80gb", mib=81920, cc=(8, 0))
L4 = dict(name="NVIDIA L4", key="l4", mib=23034, cc=(8, 9))


def deepseek_v2_lite() -> ModelSpec:
    # deepseek-ai/DeepSeek-V2-Lite config.json: 27 layers, 16 heads (num_key_value_heads 16), MLA 512 + 64
    return deepseek_v3(path="/models/dsv2-lite", attention=AttentionSpec(
        kind="mla", num_layers=27, num_heads=16, num_kv_heads=16, head_dim=192, v_head_dim=128, kv_lora_rank=512,
        qk_rope_head_dim=64, qk_nope_head_dim=128), mtp_layers=0)


def gemma2_9b() -> ModelSpec:
    types = tuple("sliding" if i % 2 == 0 else "full" for i in range(42))
    return ModelSpec(path="/models/gemma-2-9b", format="hf", hidden_size=3584, intermediate_size=14336,
                     vocab_size=256000, max_position_embeddings=8192, dtype="bfloat16",
                     attention=AttentionSpec(kind="hybrid", num_layers=42, num_heads=16, num_kv_heads=8, head_dim=256,
                                             sliding_window=4096, layer_types=types, num_sliding_layers=21,
                                             num_full_layers=21),
                     config={"max_position_embeddings": 8192, "model_type": "gemma2"})


@pytest.mark.parametrize(("version", "per_layer"), [
    ("0.6.4", 2 * 16 * 256 * 2),      # K and V of 16 heads padded to 256
    ("0.7.0", 2 * 16 * 192 * 2),      # K and V of 16 heads of qk_nope + qk_rope
    ("0.7.3", 640 * 2),               # latent 576 rounded up to 256 bytes (1,152 -> 1,280)
    ("0.10.1", 576 * 2),              # the latent as is
])
def test_mla_cache_layout_follows_the_release(version, per_layer):
    plan = plan_deployment(deployment(deepseek_v2_lite(), {"kv_cache_memory_bytes": str(4 * GiB),
                                                           "max_model_len": 4096},
                                      gpu=gpus(1, **H100), version=version))
    assert plan.bytes_per_token_per_layer == per_layer
    assert plan.kv_tokens == 4 * GiB // (16 * per_layer) // 27 * 16


def test_mla_heads_are_split_by_tp_before_the_latent_cache():
    spec = deepseek_v2_lite()
    assert kv_bytes_per_token_per_layer(spec, 4, mla_layout="mha_padded_256") == 2 * 4 * 256 * 2
    assert kv_bytes_per_token_per_layer(spec, 4, mla_layout="latent") == 576 * 2  # not divided by TP
    with pytest.raises(BadInput):
        kv_bytes_per_token_per_layer(spec, 1, mla_layout="paged")


def test_vllm_mla_disable_stores_k_and_v_of_every_head():
    dep = deployment(deepseek_v2_lite(), {"kv_cache_memory_bytes": str(GiB), "max_model_len": 4096},
                     gpu=gpus(1, **H100), version="0.10.1", env={"VLLM_MLA_DISABLE": "1"})
    plan = plan_deployment(dep)
    assert plan.bytes_per_token_per_layer == 2 * 16 * 192 * 2
    assert any("VLLM_MLA_DISABLE" in n for n in plan.notes)


@pytest.mark.parametrize(("version", "gpu", "mnbt", "mns"), [
    ("0.7.3", H100, 8192, 256),     # 0.7.x: H100/H200 by name; max_num_seqs stays 256
    ("0.7.3", A100, 2048, 256),
    ("0.8.5", A100, 8192, 1024),    # 0.8.x: any GPU with >= 70 GiB, A100 included
    ("0.10.1", A100, 2048, 256),    # 0.9+: A100 excluded (PR #17885)
    ("0.10.1", H100, 8192, 1024),
    ("0.10.1", L4, 2048, 256),
])
def test_v1_serve_batch_defaults_per_release_and_gpu(version, gpu, mnbt, mns):
    dep = deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": 8192}, gpu=gpus(4, **gpu),
                     version=version, env={"VLLM_USE_V1": "1"})
    plan = plan_deployment(dep)
    assert (plan.max_num_batched_tokens, plan.max_num_seqs) == (mnbt, mns)


@pytest.mark.parametrize(("gpu", "mnbt"), [(H100, 16384), (L4, 8192)])
def test_llm_class_gets_the_offline_batch_budget(gpu, mnbt):
    dep = deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": 32768}, gpu=gpus(4, **gpu),
                     version="0.10.1")
    serve = plan_deployment(dep)
    offline = plan_deployment(replace(dep, launch=replace(dep.launch, program="LLM")))
    assert offline.max_num_batched_tokens == mnbt > serve.max_num_batched_tokens


@pytest.mark.parametrize(("version", "mnbt"), [("0.5.1", 65536), ("0.6.4", 512), ("0.6.6", 2048)])
def test_v0_long_context_turns_on_chunked_prefill_with_the_release_budget(version, mnbt):
    plan = plan_deployment(deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": 65536},
                                      gpu=gpus(4, **H100), version=version))
    assert plan.generation == "v0"
    assert plan.max_num_batched_tokens == mnbt
    short = plan_deployment(deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": 16384},
                                       gpu=gpus(4, **H100), version=version))
    assert short.max_num_batched_tokens == 16384  # max(max_model_len, 2048) without chunked prefill


@pytest.mark.parametrize(("version", "env", "derived"), [
    ("0.5.4", {}, 4096),                                     # always capped to the window
    ("0.6.6", {}, 8192),                                     # runs as full attention, no cap
    ("0.6.6", {"VLLM_ATTENTION_BACKEND": "XFORMERS"}, 4096),  # cap only with xformers
    ("0.10.1", {}, 8192),                                    # V1: hybrid groups, no cap
])
def test_v0_caps_interleaved_sliding_window_models_to_the_window(version, env, derived):
    plan = plan_deployment(deployment(gemma2_9b(), {"tensor_parallel_size": 8}, gpu=gpus(8, **L4),
                                      version=version, env=env))
    assert plan.max_model_len == derived


def test_v0_non_torch_counts_the_cuda_context_only_in_0_6_4():
    # 0.6.4 measures total - free - torch memory (context included); 0.6.5+ measures the growth
    # since the worker's baseline snapshot, as 0.5.x measured growth since init: same spec, same GPU.
    def plan(version):
        return plan_deployment(deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": 4096},
                                          gpu=gpus(4, **H100), version=version))

    def term(p, name):
        return next(t.bytes for t in p.terms if t.name == name)

    p054, p064, p066 = plan("0.5.4"), plan("0.6.4"), plan("0.6.6")
    assert term(p064, "non_torch") > term(p066, "non_torch") == term(p054, "non_torch")
    assert p066.available_kv_bytes - p064.available_kv_bytes == term(p064, "non_torch") - term(p066, "non_torch")


def test_v0_sampler_warm_up_sorts_float32_logits_of_every_sequence():
    from servepilot.planning.facts import fact

    # a short max_model_len: the profile's sampler over 256 x vocab outweighs the forward pass
    plan = plan_deployment(deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": 2048},
                                      gpu=gpus(4, **H100), version="0.6.6"))
    per_logit = fact("vllm", "sampler_bytes_per_logit", "0.6.6").value
    peak = next(t.bytes for t in plan.terms if t.name == "activation_peak")
    assert per_logit >= 2 + 4 + 8 + 4 + 8  # model-dtype logits, float32 copy, sort inputs and outputs
    assert peak == pytest.approx(256 * 128256 * per_logit, rel=0.01)


def _fp32_llama(**over) -> ModelSpec:
    return replace(llama_70b(), dtype="float32", config={"max_position_embeddings": 131072, "torch_dtype": "float32"},
                   **over)


def test_float32_checkpoint_loads_in_16_bits_unless_asked_for_float32():
    from planning_builders import tensor, with_tensors

    layers = [tensor(f"model.layers.{i}.mlp.down_proj.weight", 8192, 28672, itemsize=4) for i in range(80)]
    layers += [replace(tensor("model.embed_tokens.weight", 128256, 8192, itemsize=4), dtype="F32"),
               replace(tensor("lm_head.weight", 128256, 8192, itemsize=4), dtype="F32")]
    spec = with_tensors(_fp32_llama(), [replace(t, dtype="F32") for t in layers])
    stored = sum(t.nbytes for t in spec.weights.tensors)

    def weights(options):
        plan = plan_deployment(deployment(spec, {"max_model_len": 4096, **options}, gpu=gpus(1, **H100),
                                          version="0.10.1"))
        return next(t.bytes for t in plan.terms if t.name == "weights")

    auto, fp32 = weights({}), weights({"dtype": "float32"})
    assert fp32 == pytest.approx(stored, rel=0.001)   # vocab padding to 64 aside
    assert auto == pytest.approx(stored / 2, rel=0.001)


def test_float32_index_total_is_halved_for_a_16_bit_run():
    from servepilot.checkpoint.spec import WeightsInfo
    from servepilot.planning.weights import split_weights

    total = 282_214_825_984  # a float32 70B index: 70.55e9 parameters x 4 bytes
    spec = _fp32_llama(weights=WeightsInfo(source="index", total_bytes=total, shards=30, index_total_bytes=total))
    assert split_weights(spec, run_dtype="float32").total_bytes == total
    assert split_weights(spec, run_dtype="bfloat16").total_bytes == pytest.approx(total / 2, rel=0.001)


B200 = dict(name="NVIDIA B200", key="b200", mib=183359, cc=(10, 0))
B300 = dict(name="NVIDIA B300", key="b300", mib=275040, cc=(10, 3))


@pytest.mark.parametrize(("gpu", "tp", "version", "inter", "hidden"), [
    # Marlin: 2,880 / 4 = 720 -> 768 (x128), hidden 2,880 -> 3,072 (x256)
    (A100, 4, "0.10.1", 768, 3072),
    (A100, 1, "0.12.0", 2944, 3072),  # Marlin below 9.0 in every release
    # 0.10.1 - 0.11.x ship no triton_kernels: Hopper runs Marlin (issue #23278's H100 log)
    (H100, 1, "0.10.1", 2944, 3072),
    (H100, 4, "0.11.0", 768, 3072),
    # Triton (vendored from 0.12): 720 -> 768 (x64), hidden unpadded
    (H100, 4, "0.12.0", 768, 2880),
    (H100, 2, "0.13.0", 1472, 2880),  # Triton: 1,440 -> 1,472
    (B200, 4, "0.10.1", 768, 3072),   # FlashInfer: x256
    (B300, 4, "0.12.0", 768, 2880),   # 10.3 is not is_device_capability(100): Triton
    (B300, 4, "0.13.0", 768, 3072),   # the 10.x family gets FlashInfer from 0.13
])
def test_mxfp4_experts_are_padded_to_the_kernel_multiples(gpu, tp, version, inter, hidden):
    from planning_builders import gpt_oss

    from servepilot.checkpoint.spec import QuantSpec

    spec = gpt_oss(quant=QuantSpec(method="mxfp4"))
    base = plan_deployment(deployment(spec, {"tensor_parallel_size": tp, "max_model_len": 8192},
                                      gpu=gpus(tp, **gpu), version="0.10.0"))  # before gpt-oss: no rule
    padded = plan_deployment(deployment(spec, {"tensor_parallel_size": tp, "max_model_len": 8192},
                                        gpu=gpus(tp, **gpu), version=version))
    factor = inter * hidden / (2880 // tp * 2880)

    def experts(plan):
        return next(t.bytes for t in plan.terms if t.name == "weights")

    from servepilot.planning.weights import split_weights

    expert_share = split_weights(spec, tp=tp).by_kind["expert"]
    assert experts(padded) - experts(base) == pytest.approx(expert_share * (factor - 1), rel=0.01, abs=2)


def test_mxfp4_marlin_forced_by_env_on_hopper_where_triton_would_run():
    from planning_builders import gpt_oss

    from servepilot.checkpoint.spec import QuantSpec

    spec = gpt_oss(quant=QuantSpec(method="mxfp4"))

    def weights(env):
        plan = plan_deployment(deployment(spec, {"max_model_len": 8192}, gpu=gpus(1, **H100),
                                          version="0.13.0", env=env))
        return next(t.bytes for t in plan.terms if t.name == "weights")

    assert weights({"VLLM_MXFP4_USE_MARLIN": "1"}) > weights({}) + 4 * GiB  # x1.09 of ~57 GiB


@pytest.mark.parametrize(("version", "mnbt"), [("0.6.4", 512), ("0.7.3", 2048)])
def test_v0_mla_long_context_profiles_the_chunked_budget(version, mnbt):
    # 0.7.x switches chunked prefill off for MLA only after max_num_batched_tokens was sized
    plan = plan_deployment(deployment(deepseek_v2_lite(), {"max_model_len": 65536}, gpu=gpus(1, **H100),
                                      version=version))
    assert plan.generation == "v0" and plan.max_num_batched_tokens == mnbt


def test_v1_before_0_9_2_counts_the_cuda_context_as_non_torch_memory():
    def non_torch(version, env=None):
        plan = plan_deployment(deployment(llama_70b(), {"tensor_parallel_size": 4, "max_model_len": 4096},
                                          gpu=gpus(4, **H100), version=version, env=env))
        return plan.generation, next(t.bytes for t in plan.terms if t.name == "non_torch")

    gen085, nt085 = non_torch("0.8.5")
    gen085_v0, nt085_v0 = non_torch("0.8.5", {"VLLM_USE_V1": "0"})
    gen092, nt092 = non_torch("0.9.2")
    assert (gen085, gen085_v0, gen092) == ("v1", "v0", "v1")
    # total - free - torch memory (context included) in 0.8.x V1; growth since a snapshot otherwise
    assert nt085 > nt092 and nt085 > nt085_v0


def test_from_0_21_kv_tokens_are_concurrency_times_max_model_len():
    from planning_builders import gpt_oss

    def plan(version):
        return plan_deployment(deployment(gpt_oss(), {"tensor_parallel_size": 2, "max_model_len": 100_000,
                                                      "kv_cache_memory_bytes": str(20 * GiB)},
                                          gpu=gpus(2, **H100), version=version))

    old, new = plan("0.16.0"), plan("0.21.0")
    assert old.num_blocks == new.num_blocks
    assert old.kv_tokens == old.num_blocks // old.kv_groups * 16
    # hybrid: a request holds only the window in sliding layers, so the concurrency count is larger
    assert new.kv_tokens == int(new.max_concurrency * 100_000) > old.kv_tokens


def test_fused_moe_caches_apart_before_0_8_and_unchunked_before_0_5():
    from servepilot.planning.budget import activation_peak

    spec = deepseek_v2_lite()  # 64 experts, 6 per token, intermediate 1408, hidden 7168 in the builder
    tokens = 65536
    kw = dict(tp=1, expert_parallel=False, batched_tokens=tokens, num_seqs=1, sampler_bytes_per_logit=0)
    shared, _ = activation_peak(spec, moe_chunk_tokens=32768, moe_cache13_shared=True, **kw)
    apart, _ = activation_peak(spec, moe_chunk_tokens=32768, moe_cache13_shared=False, **kw)
    unchunked, _ = activation_peak(spec, moe_chunk_tokens=0, moe_cache13_shared=False, **kw)
    inter, hidden, k = 2048, 7168, 8  # the deepseek_v3 builder's MoE geometry
    # (the forward is the larger of attention and MLP, so only part of the difference may show)
    assert 0 < apart - shared <= 32768 * k * (2 * inter + hidden - max(2 * inter, hidden)) * 2
    assert unchunked > apart


@pytest.mark.parametrize(("version", "env", "noted"), [
    ("0.8.4", {}, True),                     # V1: non-torch = total - free - torch
    ("0.8.4", {"VLLM_USE_V1": "0"}, False),  # V0: measured from its baseline snapshot
    ("0.5.5", {}, False),                    # peak = init free - free
    ("0.11.0", {}, False),                   # V1 from its start-up snapshot
])
def test_releases_that_count_other_processes_memory_say_so(version, env, noted):
    options = {"tensor_parallel_size": 8, "max_model_len": 8192}
    plan = plan_deployment(deployment(llama_70b(), options, gpu=gpus(8, **H100), version=version,
                                      env=env))
    assert any("other processes" in n for n in plan.notes) == noted


def test_sampler_sorts_natively_where_flashinfer_is_only_an_extra():
    # issue #23278: gpt-oss-120b from pip (0.10.1) on one H100 prints "Available KV cache
    # memory: -2.14 GiB"; the vllm/vllm-openai image ships FlashInfer's sampler (no sort)
    from planning_builders import gpt_oss

    from servepilot.checkpoint.spec import QuantSpec
    from servepilot.engines.command import ShellContext

    spec = gpt_oss(quant=QuantSpec(method="mxfp4"))
    dep = deployment(spec, {}, gpu=gpus(1, **H100), version="0.10.1")
    image = {"container": {"image": "vllm/vllm-openai:v0.10.1"}}
    pip = plan_deployment(dep)
    docker = plan_deployment(replace(dep, extra=image))
    opted_out = plan_deployment(replace(dep, extra=image, launch=replace(
        dep.launch, shell=ShellContext(env={"VLLM_USE_FLASHINFER_SAMPLER": "0"}))))
    assert -3 * GiB < pip.available_kv_bytes < -1 * GiB
    assert docker.available_kv_bytes > 1 * GiB
    assert opted_out.available_kv_bytes == pip.available_kv_bytes
    assert any("sorts natively" in n for n in pip.notes)
    assert not any("sorts natively" in n for n in docker.notes)


def test_sampler_choice_is_not_split_where_the_release_samples_one_way():
    from planning_builders import gpt_oss

    from servepilot.checkpoint.spec import QuantSpec

    spec = gpt_oss(quant=QuantSpec(method="mxfp4"))
    dep = deployment(spec, {}, gpu=gpus(1, **H100), version="0.12.0")
    pip = plan_deployment(dep)
    image = {"container": {"image": "vllm/vllm-openai:v0.12.0"}}
    docker = plan_deployment(replace(dep, extra=image))
    assert pip.available_kv_bytes == docker.available_kv_bytes
    assert not any("sorts natively" in n for n in pip.notes)
