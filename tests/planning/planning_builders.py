"""Builders for planner tests: specs, GPUs and deployments made from the shared dataclasses.

Numbers are the published architectures (config.json of each model card); nothing here reads
../shared or the network.
"""

from __future__ import annotations

import pytest

from servepilot.checkpoint.spec import AttentionSpec, ModelSpec, MoESpec, TensorInfo, WeightsInfo
from servepilot.deployment import Deployment
from servepilot.engines.command import EngineLaunch, ShellContext
from servepilot.hardware.cluster import Cluster, Gpu

GiB = 1 << 30
MiB = 1 << 20


def llama_70b(**over) -> ModelSpec:
    kw = dict(path="/models/llama-70b", format="hf", hidden_size=8192, intermediate_size=28672, vocab_size=128256,
              max_position_embeddings=131072, dtype="bfloat16",
              attention=AttentionSpec(kind="gqa", num_layers=80, num_heads=64, num_kv_heads=8, head_dim=128),
              config={"max_position_embeddings": 131072})
    kw.update(over)
    return ModelSpec(**kw)


def qwen2_7b(**over) -> ModelSpec:
    kw = dict(path="/models/qwen2-7b", format="hf", hidden_size=3584, intermediate_size=18944, vocab_size=152064,
              max_position_embeddings=32768, dtype="bfloat16",
              attention=AttentionSpec(kind="gqa", num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128,
                                      sliding_window=131072),
              config={"max_position_embeddings": 32768, "use_sliding_window": False})
    kw.update(over)
    return ModelSpec(**kw)


def deepseek_v3(**over) -> ModelSpec:
    kw = dict(path="/models/deepseek-v3", format="hf", hidden_size=7168, intermediate_size=18432, vocab_size=129280,
              max_position_embeddings=163840, dtype="bfloat16", mtp_layers=1,
              attention=AttentionSpec(kind="mla", num_layers=61, num_heads=128, num_kv_heads=128, head_dim=192,
                                      v_head_dim=128, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                                      qk_nope_head_dim=128),
              moe=MoESpec(num_experts=256, experts_per_token=8, num_shared_experts=1, first_dense_layers=3,
                          expert_intermediate_size=2048),
              config={"max_position_embeddings": 163840})
    kw.update(over)
    return ModelSpec(**kw)


def gpt_oss(**over) -> ModelSpec:
    types = tuple("sliding" if i % 2 == 0 else "full" for i in range(36))
    kw = dict(path="/models/gpt-oss-120b", format="hf", hidden_size=2880, intermediate_size=2880, vocab_size=201088,
              max_position_embeddings=131072, dtype="bfloat16",
              attention=AttentionSpec(kind="hybrid", num_layers=36, num_heads=64, num_kv_heads=8, head_dim=64,
                                      sliding_window=128, layer_types=types, num_sliding_layers=18, num_full_layers=18),
              moe=MoESpec(num_experts=128, experts_per_token=4, expert_intermediate_size=2880),
              config={"max_position_embeddings": 131072})
    kw.update(over)
    return ModelSpec(**kw)


def tensor(name: str, *shape: int, itemsize: int = 2) -> TensorInfo:
    n = 1
    for s in shape:
        n *= s
    return TensorInfo(name=name, dtype="BF16", shape=tuple(shape), nbytes=n * itemsize)


def with_tensors(spec: ModelSpec, tensors: list[TensorInfo]) -> ModelSpec:
    from dataclasses import replace

    total = sum(t.nbytes for t in tensors)
    return replace(spec, weights=WeightsInfo(source="safetensors", total_bytes=total, shards=1, tensors=tuple(tensors)))


def gpus(n: int, name="NVIDIA H200", key="h200", mib=143771, cc=(9, 0)) -> tuple[Gpu, ...]:
    return tuple(Gpu(i, name, key, mib * MiB, cc) for i in range(n))


def deployment(spec, options=None, *, n_gpus=8, gpu=None, engine="vllm", version="0.16.0", env=None) -> Deployment:
    launch = EngineLaunch(engine=engine, argv=(engine,), program=engine, model=spec.path if spec else "m",
                          options=dict(options or {}), engine_version=version, shell=ShellContext(env=dict(env or {})))
    cluster = Cluster(gpus=gpu if gpu is not None else gpus(n_gpus), source="flag")
    return Deployment(launch=launch, cluster=cluster, spec=spec)




@pytest.fixture(autouse=True)
def no_resolver(monkeypatch):
    """Plan tests pin the KV dtype and block size themselves; the check layer's resolver has
    its own tests. (Imported by each test module: a conftest.py here would shadow the
    `from conftest import ...` of other test folders.)"""
    import servepilot.planning.plan as plan_module

    monkeypatch.setattr(plan_module, "_try_resolve", lambda dep, notes: None)
