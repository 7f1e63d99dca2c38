"""Checkpoints written into tmp dirs and Deployments built from the shared dataclasses.

Config numbers follow the published configs of the families (DeepSeek-V3 MLA 512/64/128,
Llama-3.1-8B GQA 32/8/128); no file outside the test's tmp dir is read.
"""

from __future__ import annotations

import json
from pathlib import Path

from servepilot.checkpoint.inspect import inspect_path
from servepilot.deployment import Deployment
from servepilot.engines.command import EngineLaunch, ShellContext
from servepilot.hardware.cluster import Cluster, Gpu

GIB = 2**30

MLA_TEXT = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "vocab_size": 163840, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "max_position_embeddings": 262144,
    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096},
    "dtype": "bfloat16",
}


def qwen3_30b_a3b_config(moe_intermediate: int = 768, **extra) -> dict:
    """Qwen3-30B-A3B's shapes (config.json of Qwen/Qwen3-30B-A3B), with the expert width and any
    keys a test varies."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
        "intermediate_size": 6144, "moe_intermediate_size": moe_intermediate, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
        "num_experts_per_tok": 8, "vocab_size": 151936, "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16", **extra,
    }


KV_SCHEME = {"dynamic": False, "num_bits": 8, "type": "float"}
NVFP4_GROUP = {"group_0": {"targets": ["Linear"],
                           "weights": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16},
                           "input_activations": {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16}}}


def _write(root: Path, name: str, obj) -> None:
    (root / name).write_text(json.dumps(obj, indent=1) if not isinstance(obj, str) else obj)


def _index(root: Path, total: int) -> None:
    _write(root, "model.safetensors.index.json",
           {"metadata": {"total_size": total}, "weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"}})


def kimi_like(root: Path, *, kv_in_config: bool = True, kv_in_hf_quant: bool = True, kv_scheme=KV_SCHEME) -> Path:
    """A Kimi-K2.5-NVFP4-shaped checkpoint: nested DeepSeek-V3 text tower, modelopt NVFP4, custom code."""
    root.mkdir(parents=True, exist_ok=True)
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "producer": {"name": "modelopt", "version": "0.41.0"},
          "config_groups": NVFP4_GROUP, "ignore": ["language_model.lm_head"]}
    if kv_in_config:
        qc["kv_cache_scheme"] = kv_scheme
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "auto_map": {"AutoConfig": "configuration_kimi.KimiConfig",
                     "AutoModelForCausalLM": "modeling_kimi.KimiForCausalLM"},
        "text_config": MLA_TEXT, "dtype": "bfloat16", "quantization_config": qc,
    }
    _write(root, "config.json", config)
    inner = {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["language_model.lm_head"]}
    if kv_in_hf_quant:
        inner["kv_cache_quant_algo"] = "FP8"
    _write(root, "hf_quant_config.json", {"producer": {"name": "modelopt", "version": "0.41.0"}, "quantization": inner})
    _write(root, "configuration_kimi.py", "# stand-in configuration code\n")
    _write(root, "modeling_kimi.py", "# stand-in modelling code\n")
    _index(root, 595 * 10**9)
    return root


def old_modelopt_gqa(root: Path, *, kv_algo: str | None = "FP8") -> Path:
    """An older ModelOpt export: no quantization_config in config.json, only hf_quant_config.json."""
    root.mkdir(parents=True, exist_ok=True)
    _write(root, "config.json", {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 4096,
                                 "intermediate_size": 12288,
        "moe_intermediate_size": 1536, "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4,
        "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
        "max_position_embeddings": 40960, "torch_dtype": "bfloat16",
    })
    inner = {"quant_algo": "NVFP4", "group_size": 16}
    if kv_algo:
        inner["kv_cache_quant_algo"] = kv_algo
    _write(root, "hf_quant_config.json", {"producer": {"name": "modelopt", "version": "0.33.0"}, "quantization": inner})
    _index(root, 134 * 10**9)
    return root


def llama_like(root: Path, *, heads: int = 32, kv_heads: int = 8, quant: dict | None = None, max_pos: int = 131072,
               arch: str = "LlamaForCausalLM", model_type: str = "llama", dtype: str = "bfloat16",
               intermediate: int = 14336,
               auto_map: dict | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    config = {"architectures": [arch], "model_type": model_type, "hidden_size": heads * 128,
              "intermediate_size": intermediate,
              "num_hidden_layers": 32, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
              "vocab_size": 128256,
              "max_position_embeddings": max_pos, "torch_dtype": dtype}
    if quant:
        config["quantization_config"] = quant
    if auto_map:
        config["auto_map"] = auto_map
        for target in auto_map.values():
            _write(root, target.split(".")[0] + ".py", "# custom code\n")
    _write(root, "config.json", config)
    _index(root, 16 * 10**9)
    return root


def sparse_mla(root: Path) -> Path:
    """DeepSeek-V3.2-shaped: MLA plus an indexer (index_topk) -> sparse MLA backends only."""
    root.mkdir(parents=True, exist_ok=True)
    config = dict(MLA_TEXT, architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32", index_topk=2048,
                  n_routed_experts=256, num_attention_heads=128, num_key_value_heads=128,
                  max_position_embeddings=163840)
    config.pop("rope_scaling")
    _write(root, "config.json", config)
    _index(root, 689 * 10**9)
    return root


def gpus(kind: str = "rtx-pro-6000", n: int = 8, cc=(12, 0), memory: int = 96 * GIB) -> tuple[Gpu, ...]:
    return tuple(Gpu(index=i, name=kind, key=kind, memory_bytes=memory, compute_capability=cc) for i in range(n))


def deployment(spec_or_path, *, cc=(12, 0), n: int = 8, version: str | None = "0.16.0", engine: str = "vllm",
               options: dict | None = None, env: dict | None = None, memory: int = 96 * GIB, source: str = "flag",
               topology: str | None = None, shm: int | None = None, arch_list=None, gpu_list=None) -> Deployment:
    spec = inspect_path(spec_or_path) if isinstance(spec_or_path, (str, Path)) else spec_or_path
    opts = {"tensor_parallel_size": n} if engine == "vllm" else {}
    opts.update(options or {})
    launch = EngineLaunch(engine=engine, argv=("vllm", "serve", spec.path if spec else "m"), program="vllm serve",
                          model=spec.path if spec else None, options=opts, explicit=frozenset(opts),
                          shell=ShellContext(env=dict(env or {})), engine_version=version)
    cluster = Cluster(gpus=gpu_list if gpu_list is not None else gpus(n=n, cc=cc, memory=memory), source=source,
                      topology=topology, shm_bytes=shm, torch_cuda_arch_list=arch_list)
    return Deployment(launch=launch, cluster=cluster, spec=spec)


def sglang_deployment(spec_or_path, cc, version, *, memory: int = 96 * GIB, **options) -> Deployment:
    """One GPU serving SGLang `version` (TP 1 unless `options` say otherwise)."""
    return deployment(spec_or_path, cc=cc, n=1, version=version, engine="sglang",
                      options={"tp_size": 1, **options}, memory=memory)


def codes(result) -> list[str]:
    return [f.code for f in result.findings]


def finding(result, code: str):
    found = [f for f in result.findings if f.code == code]
    assert found, f"{code} not in {codes(result)}"
    return found[0]


def gpt_oss_120b(root: Path) -> Path:
    """openai/gpt-oss-120b's config.json (published numbers): MXFP4 experts, attention sinks,
    sliding-window layers alternating with full attention; no weights index (the planner sizes
    the weights from the shapes)."""
    root.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
              "intermediate_size": 2880, "head_dim": 64, "num_hidden_layers": 36,
              "num_attention_heads": 64, "num_key_value_heads": 8, "num_local_experts": 128,
              "experts_per_token": 4, "num_experts_per_tok": 4, "vocab_size": 201088,
              "max_position_embeddings": 131072, "sliding_window": 128,
              "layer_types": ["sliding_attention", "full_attention"] * 18,
              "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
                  "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                  "lm_head"]},
              "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    _write(root, "config.json", config)
    return root
