"""Checkpoint skeletons for benches: config.json from published architecture numbers.

    config_for("Qwen/Qwen2-7B-Instruct")      -> the config.json dict, or None when unknown
    write_checkpoint(tmp, "Qwen2-7B-Instruct-AWQ") -> tmp (config.json [+ hf_quant_config.json]
                                                  [+ model.safetensors.index.json])

Names match tolerantly: HF ids, bare names, local directory names, any case; a trailing
-Instruct/-Chat/-it/-hf and quantization suffixes (-AWQ, -GPTQ-Int4/Int8, -FP8[-dynamic],
-W8A8/-quantized.w8a8, -NVFP4, -bnb-4bit) map to the base architecture, and the suffix adds the
matching quantization_config. Every family's numbers are the `config.json` of the model
card named in its comment; nothing here is fitted to a benchmark row.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def dense(layers, hidden, heads, kv, inter, vocab, maxpos, *, tie=False, head_dim=None, model_type="llama",
          arch="LlamaForCausalLM", dtype="bfloat16", **extra) -> dict:
    cfg = {"architectures": [arch], "model_type": model_type, "num_hidden_layers": layers, "hidden_size": hidden,
           "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": vocab,
           "max_position_embeddings": maxpos, "tie_word_embeddings": tie, "torch_dtype": dtype}
    if head_dim:
        cfg["head_dim"] = head_dim
    cfg.update(extra)
    return cfg


def qwen(layers, hidden, heads, kv, inter, vocab, maxpos, *, model_type="qwen2", arch="Qwen2ForCausalLM", **kw) -> dict:
    return dense(layers, hidden, heads, kv, inter, vocab, maxpos, model_type=model_type, arch=arch, **kw)


def qwen3(layers, hidden, heads, kv, inter, maxpos=40960, **kw) -> dict:
    return dense(layers, hidden, heads, kv, inter, 151936, maxpos, head_dim=128, model_type="qwen3",
                 arch="Qwen3ForCausalLM", **kw)


def qwen3_moe(layers, hidden, heads, kv, experts, topk, moe_inter, maxpos=40960) -> dict:
    return dense(layers, hidden, heads, kv, 6144, 151936, maxpos, head_dim=128, model_type="qwen3_moe",
                 arch="Qwen3MoeForCausalLM", num_experts=experts, num_experts_per_tok=topk,
                 moe_intermediate_size=moe_inter, decoder_sparse_step=1,
                 norm_topk_prob=True)  # Qwen/Qwen3-30B-A3B and -235B-A22B config.json


def gemma2(layers, hidden, heads, kv, inter, head_dim) -> dict:
    return dense(layers, hidden, heads, kv, inter, 256000, 8192, tie=True, head_dim=head_dim, model_type="gemma2",
                 arch="Gemma2ForCausalLM", sliding_window=4096, final_logit_softcapping=30.0,
                 attn_logit_softcapping=50.0,  # google/gemma-2-{2b,9b,27b} config.json
                 layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)])


def gemma3(layers, hidden, heads, kv, inter, head_dim, *, vocab=262208, maxpos=131072, window=1024) -> dict:
    # every sixth layer is global (full) attention, the rest slide over `window` tokens
    return dense(layers, hidden, heads, kv, inter, vocab, maxpos, tie=True, head_dim=head_dim, model_type="gemma3_text",
                 arch="Gemma3ForCausalLM", sliding_window=window,
                 layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)])


def mla(layers, hidden, heads, inter, vocab, maxpos, *, kv_lora, q_lora, experts, shared, topk, moe_inter,
        first_dense, arch="DeepseekV2ForCausalLM", model_type="deepseek_v2") -> dict:
    # DeepSeek multi-head latent attention: one latent of kv_lora_rank + qk_rope_head_dim per token and layer
    return dense(layers, hidden, heads, heads, inter, vocab, maxpos, model_type=model_type, arch=arch,
                 kv_lora_rank=kv_lora, q_lora_rank=q_lora, qk_nope_head_dim=128, qk_rope_head_dim=64,
                 v_head_dim=128, n_routed_experts=experts, n_shared_experts=shared, num_experts_per_tok=topk,
                 moe_intermediate_size=moe_inter, first_k_dense_replace=first_dense, moe_layer_freq=1)


def opt(layers, hidden, heads, ffn) -> dict:
    return dense(layers, hidden, heads, heads, ffn, 50272, 2048, tie=True, model_type="opt", arch="OPTForCausalLM",
                 dtype="float16", ffn_dim=ffn)


def chatglm(layers, hidden, heads, groups, ffn, vocab, seq) -> dict:
    # THUDM ChatGLM format: its own key names, custom configuration/modeling code (auto_map)
    return {"architectures": ["ChatGLMModel"], "model_type": "chatglm", "num_layers": layers, "hidden_size": hidden,
            "num_attention_heads": heads, "multi_query_attention": True, "multi_query_group_num": groups,
            "kv_channels": hidden // heads, "ffn_hidden_size": ffn, "padded_vocab_size": vocab, "seq_length": seq,
            "torch_dtype": "bfloat16",
            "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                         "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration"}}


# Published tokenizer_config.json files carry a Jinja chat template; its text matters to no check
TEMPLATE_ELIDED = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}


@dataclass(frozen=True)
class Family:
    pattern: str  # regex searched in the normalized (lower-case, bare, suffix-free) name
    config: dict | str  # the config.json, or the name of a checked-in examples/ directory
    origin: str  # whose config.json the numbers are
    files: dict = field(default_factory=dict)  # other published files the checkpoint's checks read


# First match wins: more specific patterns come first.
FAMILIES: list[Family] = [
    # Meta Llama 2 / 3 / 3.1 / 3.2 / 3.3: meta-llama/<name>/config.json
    Family(r"llama-2-7b", dense(32, 4096, 32, 32, 11008, 32000, 4096, dtype="float16"), "meta-llama/Llama-2-7b-hf"),
    Family(r"llama-2-13b", dense(40, 5120, 40, 40, 13824, 32000, 4096, dtype="float16"), "meta-llama/Llama-2-13b-hf"),
    Family(r"llama-2-70b", dense(80, 8192, 64, 8, 28672, 32000, 4096, dtype="float16"), "meta-llama/Llama-2-70b-hf"),
    Family(r"llama-3-8b", dense(32, 4096, 32, 8, 14336, 128256, 8192, rope_theta=500000.0),
           "meta-llama/Meta-Llama-3-8B"),
    Family(r"llama-3-70b", dense(80, 8192, 64, 8, 28672, 128256, 8192, rope_theta=500000.0),
           "meta-llama/Meta-Llama-3-70B"),
    Family(r"llama-3\.1-8b|r1-distill-llama-8b|llama-3\.1-nemotron-nano-8b",
           dense(32, 4096, 32, 8, 14336, 128256, 131072, rope_scaling=LLAMA3_ROPE), "meta-llama/Llama-3.1-8B"),
    Family(r"llama-3\.[13]-70b|r1-distill-llama-70b|llama-3\.1-nemotron-70b",
           dense(80, 8192, 64, 8, 28672, 128256, 131072, rope_scaling=LLAMA3_ROPE), "meta-llama/Llama-3.1-70B"),
    Family(r"llama-3\.1-405b", dense(126, 16384, 128, 8, 53248, 128256, 131072, rope_scaling=LLAMA3_ROPE),
           "meta-llama/Llama-3.1-405B"),
    Family(r"llama-3\.2-1b", dense(16, 2048, 32, 8, 8192, 128256, 131072, tie=True, head_dim=64),
           "meta-llama/Llama-3.2-1B"),
    Family(r"llama-3\.2-3b", dense(28, 3072, 24, 8, 8192, 128256, 131072, tie=True, head_dim=128),
           "meta-llama/Llama-3.2-3B"),
    Family(r"codellama-7b", dense(32, 4096, 32, 32, 11008, 32016, 16384), "codellama/CodeLlama-7b-hf"),
    Family(r"codellama-13b", dense(40, 5120, 40, 40, 13824, 32016, 16384), "codellama/CodeLlama-13b-hf"),
    Family(r"codellama-34b", dense(48, 8192, 64, 8, 22016, 32000, 16384), "codellama/CodeLlama-34b-hf"),
    Family(r"vicuna-7b", dense(32, 4096, 32, 32, 11008, 32000, 4096, dtype="float16"), "lmsys/vicuna-7b-v1.5"),
    Family(r"vicuna-13b", dense(40, 5120, 40, 40, 13824, 32000, 4096, dtype="float16"), "lmsys/vicuna-13b-v1.5"),
    Family(r"tinyllama", dense(22, 2048, 32, 4, 5632, 32000, 2048), "TinyLlama/TinyLlama-1.1B-Chat-v1.0"),
    Family(r"yi-34b", dense(60, 7168, 56, 8, 20480, 64000, 4096), "01-ai/Yi-34B"),
    # Mistral AI: mistralai/<name>/config.json
    Family(r"mistral-7b.*v0\.1", dense(32, 4096, 32, 8, 14336, 32000, 32768, model_type="mistral",
                                       arch="MistralForCausalLM", sliding_window=4096), "mistralai/Mistral-7B-v0.1"),
    Family(r"mistral-7b.*v0\.2", dense(32, 4096, 32, 8, 14336, 32000, 32768, model_type="mistral",
                                       arch="MistralForCausalLM"), "mistralai/Mistral-7B-Instruct-v0.2"),
    Family(r"mistral-7b", dense(32, 4096, 32, 8, 14336, 32768, 32768, model_type="mistral",
                                arch="MistralForCausalLM"), "mistralai/Mistral-7B-Instruct-v0.3"),
    Family(r"mistral-nemo", dense(40, 5120, 32, 8, 14336, 131072, 1024000, head_dim=128, model_type="mistral",
                                  arch="MistralForCausalLM"), "mistralai/Mistral-Nemo-Instruct-2407"),
    Family(r"devstral-small", dense(40, 5120, 32, 8, 32768, 131072, 131072, head_dim=128, model_type="mistral",
                                    arch="MistralForCausalLM"), "mistralai/Devstral-Small-2505"),
    Family(r"mistral-small", dense(40, 5120, 32, 8, 32768, 131072, 32768, head_dim=128, model_type="mistral",
                                   arch="MistralForCausalLM"), "mistralai/Mistral-Small-24B-Instruct-2501"),
    Family(r"mixtral-8x7b", dense(32, 4096, 32, 8, 14336, 32000, 32768, model_type="mixtral", arch="MixtralForCausalLM",
                                  num_local_experts=8, num_experts_per_tok=2), "mistralai/Mixtral-8x7B-v0.1"),
    Family(r"mixtral-8x22b", dense(56, 6144, 48, 8, 16384, 32768, 65536, model_type="mixtral",
                                   arch="MixtralForCausalLM", num_local_experts=8, num_experts_per_tok=2),
           "mistralai/Mixtral-8x22B-v0.1"),
    # LLaMA-1 33B ("30B"): huggyllama/llama-30b; WizardLM/Vicuna/Guanaco 33B fine-tunes keep its
    # shape (cognitivecomputations/WizardLM-33B-V1.0-Uncensored: 52 heads, vocab 32001)
    Family(r"(llama|wizardlm|vicuna|guanaco|alpaca)-(30|33)b",
           dense(60, 6656, 52, 52, 17920, 32000, 2048, dtype="float16"),
           "huggyllama/llama-30b"),
    # hfl/chinese-alpaca-2-7b / chinese-llama-2-7b: Llama-2-7B with a 55296-token vocabulary
    Family(r"chinese-(llama|alpaca)-2-7b", dense(32, 4096, 32, 32, 11008, 55296, 4096, dtype="float16"),
           "hfl/chinese-alpaca-2-7b"),
    # Llama 4 Scout (multimodal wrapper, text_config numbers): meta-llama/Llama-4-Scout-17B-16E-Instruct
    Family(r"llama-4-scout", {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
                              "torch_dtype": "bfloat16",
                              "text_config": dense(48, 5120, 40, 8, 8192, 202048, 10485760, head_dim=128,
                                                   model_type="llama4_text", arch="Llama4ForCausalLM",
                                                   num_local_experts=16, num_experts_per_tok=1,
                                                   intermediate_size_mlp=16384, interleave_moe_layer_step=1,
                                                   attention_chunk_size=8192)},
           "meta-llama/Llama-4-Scout-17B-16E-Instruct"),
    # Qwen: Qwen/<name>/config.json
    Family(r"qwen1\.5-7b", qwen(32, 4096, 32, 32, 11008, 151936, 32768), "Qwen/Qwen1.5-7B-Chat"),
    Family(r"qwen1\.5-32b", qwen(64, 5120, 40, 8, 27392, 152064, 32768), "Qwen/Qwen1.5-32B-Chat"),
    Family(r"qwen2-57b-a14b", qwen(28, 3584, 28, 4, 18944, 151936, 32768, model_type="qwen2_moe",
                                   arch="Qwen2MoeForCausalLM", num_experts=64, num_experts_per_tok=8,
                                   moe_intermediate_size=2560, shared_expert_intermediate_size=20480,
                                   decoder_sparse_step=1), "Qwen/Qwen2-57B-A14B-Instruct"),
    Family(r"qwen2(\.5)?-math-1\.5b", qwen(28, 1536, 12, 2, 8960, 151936, 4096, tie=True), "Qwen/Qwen2.5-Math-1.5B"),
    Family(r"qwen2(\.5)?-0\.5b", qwen(24, 896, 14, 2, 4864, 151936, 32768, tie=True), "Qwen/Qwen2.5-0.5B"),
    Family(r"qwen2(\.5)?-1\.5b", qwen(28, 1536, 12, 2, 8960, 151936, 32768, tie=True), "Qwen/Qwen2.5-1.5B"),
    Family(r"qwen2\.5-3b", qwen(36, 2048, 16, 2, 11008, 151936, 32768, tie=True), "Qwen/Qwen2.5-3B"),
    Family(r"qwen2(\.5)?(-math|-coder)?-7b|r1-distill-qwen-7b", qwen(28, 3584, 28, 4, 18944, 152064, 32768),
           "Qwen/Qwen2.5-7B (Qwen2-7B has the same shape)"),
    Family(r"qwen2\.5(-coder)?-14b|r1-distill-qwen-14b", qwen(48, 5120, 40, 8, 13824, 152064, 32768),
           "Qwen/Qwen2.5-14B"),
    Family(r"qwen2\.5(-coder)?-32b|qwq-32b|r1-distill-qwen-32b", qwen(64, 5120, 40, 8, 27648, 152064, 32768),
           "Qwen/Qwen2.5-32B"),
    Family(r"qwen2(\.5)?-72b", qwen(80, 8192, 64, 8, 29568, 152064, 32768), "Qwen/Qwen2.5-72B"),
    # Qwen2-VL / Qwen2.5-VL (M-RoPE language model; vision tower numbers left out): Qwen/<name>/config.json
    Family(r"qwen2-vl-7b", qwen(28, 3584, 28, 4, 18944, 152064, 32768, model_type="qwen2_vl",
                                arch="Qwen2VLForConditionalGeneration",
                                rope_scaling={"type": "mrope",
                                              "mrope_section": [16, 24, 24]}), "Qwen/Qwen2-VL-7B-Instruct"),
    Family(r"qwen2-vl-72b", qwen(80, 8192, 64, 8, 29568, 152064, 32768, model_type="qwen2_vl",
                                 arch="Qwen2VLForConditionalGeneration",
                                 rope_scaling={"type": "mrope",
                                               "mrope_section": [16, 24, 24]}), "Qwen/Qwen2-VL-72B-Instruct"),
    Family(r"qwen2\.5-vl-7b", qwen(28, 3584, 28, 4, 18944, 152064, 128000, model_type="qwen2_5_vl",
                                  arch="Qwen2_5_VLForConditionalGeneration",
                                  rope_scaling={"type": "mrope",
                                                "mrope_section": [16, 24, 24]}), "Qwen/Qwen2.5-VL-7B-Instruct"),
    Family(r"qwen2\.5-vl-72b", qwen(80, 8192, 64, 8, 29568, 152064, 128000, model_type="qwen2_5_vl",
                                   arch="Qwen2_5_VLForConditionalGeneration",
                                   rope_scaling={"type": "mrope",
                                                 "mrope_section": [16, 24, 24]}), "Qwen/Qwen2.5-VL-72B-Instruct"),
    Family(r"qwen3-0\.6b", qwen3(28, 1024, 16, 8, 3072, tie_word_embeddings=True), "Qwen/Qwen3-0.6B"),
    Family(r"qwen3-1\.7b", qwen3(28, 2048, 16, 8, 6144, tie_word_embeddings=True), "Qwen/Qwen3-1.7B"),
    Family(r"qwen3-4b", qwen3(36, 2560, 32, 8, 9728, tie_word_embeddings=True), "Qwen/Qwen3-4B"),
    Family(r"qwen3-8b", qwen3(36, 4096, 32, 8, 12288), "Qwen/Qwen3-8B"),
    Family(r"qwen3-14b", qwen3(40, 5120, 40, 8, 17408), "Qwen/Qwen3-14B"),
    Family(r"qwen3-32b", qwen3(64, 5120, 64, 8, 25600), "Qwen/Qwen3-32B"),
    Family(r"qwen3(-coder)?-30b-a3b", qwen3_moe(48, 2048, 32, 4, 128, 8, 768), "Qwen/Qwen3-30B-A3B"),
    Family(r"qwen3-235b-a22b", qwen3_moe(94, 4096, 64, 4, 128, 8, 1536), "Qwen/Qwen3-235B-A22B"),
    Family(r"qwen3-coder-480b", dense(62, 6144, 96, 8, 8192, 151936, 262144, head_dim=128, model_type="qwen3_moe",
                                      arch="Qwen3MoeForCausalLM", num_experts=160, num_experts_per_tok=8,
                                      moe_intermediate_size=2560), "Qwen/Qwen3-Coder-480B-A35B-Instruct"),
    # Google Gemma: google/<name>/config.json
    Family(r"gemma-2-2b", gemma2(26, 2304, 8, 4, 9216, 256), "google/gemma-2-2b"),
    Family(r"gemma-2-9b", gemma2(42, 3584, 16, 8, 14336, 256), "google/gemma-2-9b"),
    Family(r"gemma-2-27b", gemma2(46, 4608, 32, 16, 36864, 128), "google/gemma-2-27b"),
    Family(r"gemma-3-1b", gemma3(26, 1152, 4, 1, 6912, 256, vocab=262144, maxpos=32768, window=512),
           "google/gemma-3-1b-it"),
    Family(r"gemma-3-4b", gemma3(34, 2560, 8, 4, 10240, 256), "google/gemma-3-4b-it (text_config)"),
    Family(r"gemma-3-12b", gemma3(48, 3840, 16, 8, 15360, 256), "google/gemma-3-12b-it (text_config)"),
    Family(r"gemma-3-27b", gemma3(62, 5376, 32, 16, 21504, 128), "google/gemma-3-27b-it (text_config)"),
    Family(r"gemma-(1\.1-)?2b", dense(18, 2048, 8, 1, 16384, 256000, 8192, tie=True, head_dim=256,
                                      model_type="gemma", arch="GemmaForCausalLM"), "google/gemma-2b"),
    Family(r"gemma-(1\.1-)?7b", dense(28, 3072, 16, 16, 24576, 256000, 8192, tie=True, head_dim=256,
                                      model_type="gemma", arch="GemmaForCausalLM"), "google/gemma-7b"),
    # Microsoft Phi: microsoft/<name>/config.json
    Family(r"phi-4", dense(40, 5120, 40, 10, 17920, 100352, 16384, model_type="phi3", arch="Phi3ForCausalLM"),
           "microsoft/phi-4"),
    Family(r"phi-3-vision", dense(32, 3072, 32, 32, 8192, 32064, 131072, model_type="phi3_v", arch="Phi3VForCausalLM",
                                  rope_scaling={"type": "su", "short_factor": [1.0] * 48, "long_factor": [1.0] * 48},
                                  original_max_position_embeddings=4096,
                                  auto_map={"AutoConfig": "configuration_phi3_v.Phi3VConfig",
                                            "AutoModelForCausalLM": "modeling_phi3_v.Phi3VForCausalLM"}),
           "microsoft/Phi-3-vision-128k-instruct (rope factors elided: 48 per list)"),
    Family(r"phi-3-medium-4k", dense(40, 5120, 40, 10, 17920, 32064, 4096, model_type="phi3", arch="Phi3ForCausalLM"),
           "microsoft/Phi-3-medium-4k-instruct"),
    Family(r"phi-3-medium", dense(40, 5120, 40, 10, 17920, 32064, 131072, model_type="phi3", arch="Phi3ForCausalLM"),
           "microsoft/Phi-3-medium-128k-instruct"),
    Family(r"phi-3-mini-4k", dense(32, 3072, 32, 32, 8192, 32064, 4096, model_type="phi3", arch="Phi3ForCausalLM",
                                   sliding_window=2047), "microsoft/Phi-3-mini-4k-instruct"),
    Family(r"phi-3(\.5)?-mini", dense(32, 3072, 32, 32, 8192, 32064, 131072, model_type="phi3", arch="Phi3ForCausalLM"),
           "microsoft/Phi-3.5-mini-instruct"),
    # OPT (float16 checkpoints): facebook/<name>/config.json
    Family(r"opt-125m", opt(12, 768, 12, 3072), "facebook/opt-125m"),
    Family(r"opt-1\.3b", opt(24, 2048, 32, 8192), "facebook/opt-1.3b"),
    Family(r"opt-6\.7b", opt(32, 4096, 32, 16384), "facebook/opt-6.7b"),
    Family(r"opt-13b", opt(40, 5120, 40, 20480), "facebook/opt-13b"),
    # THUDM ChatGLM3 / GLM-4-9B (ChatGLM format): THUDM/<name>/config.json
    Family(r"chatglm3-6b", chatglm(28, 4096, 32, 2, 13696, 65024, 8192), "THUDM/chatglm3-6b",
           {"tokenizer_config.json": {"auto_map": {"AutoTokenizer": ["tokenization_chatglm.ChatGLMTokenizer", None]},
                                      "tokenizer_class": "ChatGLMTokenizer", "padding_side": "left",
                                      "chat_template": TEMPLATE_ELIDED}}),
    Family(r"glm-4-9b", chatglm(40, 4096, 32, 2, 13696, 151552, 131072), "THUDM/glm-4-9b-chat",
           {"tokenizer_config.json": {"auto_map": {"AutoTokenizer": ["tokenization_chatglm.ChatGLM4Tokenizer", None]},
                                      "tokenizer_class": "ChatGLM4Tokenizer", "chat_template": TEMPLATE_ELIDED}}),
    # Multimodal wrappers with custom code: OpenGVLab/InternVL2-8B (InternLM2 language model),
    # openbmb/MiniCPM-V-2_6 (Qwen2-7B language model, SigLIP-400M vision tower: 1152 / 16 heads = 72)
    Family(r"internvl2-8b", {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
                             "auto_map": {"AutoConfig": "configuration_internvl_chat.InternVLChatConfig",
                                          "AutoModel": "modeling_internvl_chat.InternVLChatModel"},
                             "llm_config": dense(32, 4096, 32, 8, 14336, 92553, 32768, model_type="internlm2",
                                                 arch="InternLM2ForCausalLM"),
                             "vision_config": {"hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 24},
                             "torch_dtype": "bfloat16"}, "OpenGVLab/InternVL2-8B",
           {"tokenizer_config.json": {"auto_map": {"AutoTokenizer": ["tokenization_internlm2.InternLM2Tokenizer",
                                                                    "tokenization_internlm2_fast.InternLM2TokenizerFast"]},
                                      "tokenizer_class": "InternLM2Tokenizer", "chat_template": TEMPLATE_ELIDED}}),
    Family(r"minicpm-v-2[._-]6", qwen(28, 3584, 28, 4, 18944, 151666, 32768, model_type="minicpmv", arch="MiniCPMV",
                                      version="2.6", query_num=64,
                                      vision_config={"hidden_size": 1152, "num_attention_heads": 16,
                                                     "num_hidden_layers": 27, "intermediate_size": 4304,
                                                     "patch_size": 14, "model_type": "siglip_vision_model"},
                                      auto_map={"AutoConfig": "configuration_minicpm.MiniCPMVConfig",
                                                "AutoModel": "modeling_minicpmv.MiniCPMV"}),
           "openbmb/MiniCPM-V-2_6"),
    # MiniMax-M2 (MoE, FP8 blocks as published): MiniMaxAI/MiniMax-M2
    Family(r"minimax-m2", dense(62, 3072, 48, 8, 1536, 200064, 196608, head_dim=128, model_type="minimax_m2",
                                arch="MiniMaxM2ForCausalLM", num_local_experts=256, num_experts_per_tok=8,
                                quantization_config={"quant_method": "fp8", "fmt": "float8_e4m3fn",
                                                     "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
                                auto_map={"AutoConfig": "configuration_minimax_m2.MiniMaxM2Config",
                                          "AutoModelForCausalLM": "modeling_minimax_m2.MiniMaxM2ForCausalLM"}),
           "MiniMaxAI/MiniMax-M2"),
    # Zhipu GLM-4.5 (MoE): zai-org/<name>/config.json
    Family(r"glm-4\.5-air", dense(46, 4096, 96, 8, 10944, 151552, 131072, head_dim=128, model_type="glm4_moe",
                                  arch="Glm4MoeForCausalLM", n_routed_experts=128, n_shared_experts=1,
                                  num_experts_per_tok=8, moe_intermediate_size=1408, first_k_dense_replace=1),
           "zai-org/GLM-4.5-Air"),
    Family(r"glm-4\.[56]", dense(92, 5120, 96, 8, 12288, 151552, 131072, head_dim=128, model_type="glm4_moe",
                                 arch="Glm4MoeForCausalLM", n_routed_experts=160, n_shared_experts=1,
                                 num_experts_per_tok=8, moe_intermediate_size=1536, first_k_dense_replace=3),
           "zai-org/GLM-4.5"),
    # DeepSeek MLA: deepseek-ai/<name>/config.json
    Family(r"deepseek-(coder-)?v2(?!-lite|\.5-lite)(-chat|-instruct|-0628)?$|deepseek-v2\.5$",
           mla(60, 5120, 128, 12288, 102400, 163840, kv_lora=512, q_lora=1536, experts=160, shared=2, topk=6,
               moe_inter=1536, first_dense=1), "deepseek-ai/DeepSeek-V2"),
    Family(r"deepseek-v2-lite|deepseek-coder-v2-lite",
           mla(27, 2048, 16, 10944, 102400, 163840, kv_lora=512, q_lora=None, experts=64, shared=2, topk=6,
               moe_inter=1408, first_dense=1), "deepseek-ai/DeepSeek-V2-Lite"),
    # Checked-in skeletons (their README states each total_size's origin)
    Family(r"deepseek-(v3|r1)(?!-distill)", "deepseek-v3", "deepseek-ai/DeepSeek-V3"),
    Family(r"kimi-k2", "kimi-k2.5-nvfp4", "nvidia/Kimi-K2.5-NVFP4"),
    Family(r"gpt-oss-120b", "gpt-oss-120b", "openai/gpt-oss-120b"),
    Family(r"gpt-oss-20b", "gpt-oss-20b", "openai/gpt-oss-20b: the 120b skeleton with 24 layers and 32 experts"),
]

# Variants written from a checked-in skeleton: (example directory, config.json keys to replace).
# openai/gpt-oss-20b differs from gpt-oss-120b only in depth and expert count (config.json).
DERIVED: dict[str, tuple[str, dict]] = {
    "gpt-oss-20b": ("gpt-oss-120b", {
        "num_hidden_layers": 24, "num_local_experts": 32,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(24)]}),
}

# metadata.total_size of the real model.safetensors.index.json, keyed by the family origin's
# bare name (base and -Instruct share one size). Only sizes read from a published index.
TOTAL_SIZES: dict[str, int] = {
    "llama-3.1-8b": 16_060_522_496,  # meta-llama/Llama-3.1-8B(-Instruct) index (8,030,261,248 params x 2)
    "llama-3-8b": 16_060_522_496,  # meta-llama/Meta-Llama-3-8B(-Instruct) index: same shapes as 3.1
    "llama-3.1-70b": 141_107_412_992,  # meta-llama/Llama-3.1-70B-Instruct index
    "llama-3.3-70b": 141_107_412_992,  # meta-llama/Llama-3.3-70B-Instruct index (same shapes)
    "qwen2.5-7b": 15_231_233_024,  # Qwen/Qwen2.5-7B-Instruct index (7,615,616,512 params x 2)
    "qwen2-7b": 15_231_233_024,  # Qwen/Qwen2-7B-Instruct index
    "mistral-7b-v0.2": 14_483_464_192,  # mistralai/Mistral-7B-Instruct-v0.2 index
    "mistral-7b-v0.1": 14_483_464_192,  # mistralai/Mistral-7B-v0.1 index (same shapes as v0.2)
    "mixtral-8x7b": 93_405_585_408,  # mistralai/Mixtral-8x7B-Instruct-v0.1 index
}

# Suffix -> quantization_config (and hf_quant_config.json for modelopt exports).
_QUANT_SUFFIXES = r"(awq|gptq(-int[48])?|fp8(-dynamic)?|w8a8|w4a16|quantized\.w8a8|quantized\.w4a16|int8|int4|nvfp4|" \
                  r"bnb-4bit|4bit|8bit)"
_CHAT_SUFFIXES = r"(instruct|chat|it|hf|base)"


def normalize(model: str) -> str:
    """'Qwen/Qwen2-7B-Instruct (local dir ...)' -> 'qwen2-7b-instruct'."""
    name = model.strip().split(" (")[0].split()[0] if model.strip() else ""
    return name.rstrip("/").split("/")[-1].lower().replace("_", "-")


def base_name(model: str) -> str:
    """The name without chat and quantization words: 'Meta-Llama-3.1-8B-Instruct-AWQ' -> 'llama-3.1-8b'."""
    words = normalize(model).split("-")
    if words[:1] == ["meta"] and len(words) > 1:  # Meta-Llama-3-8B names the same checkpoint as Llama-3-8B
        words = words[1:]
    kept = [w for w in words if not re.fullmatch(_CHAT_SUFFIXES, w)]
    while len(kept) > 1 and re.fullmatch(_QUANT_SUFFIXES + r"|int[48]|dynamic|\d{4}", kept[-1]):
        kept.pop()
    return "-".join(kept)


def quantization_for(model: str) -> dict | None:
    """The quantization_config a checkpoint of this name carries, or None for a 16-bit one."""
    name = normalize(model)
    if "nvfp4" in name or "fp4" in name:
        return {"quant_method": "modelopt", "quant_algo": "NVFP4"}
    if "w8a8" in name or re.search(r"\bint8\b|-int8", name) and "gptq" not in name:
        return {"quant_method": "compressed-tensors", "ignore": ["lm_head"], "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"},
            "input_activations": {"num_bits": 8, "type": "int"}}}}
    if "w8a16" in name:
        # Neural Magic's "quantized.w8a16" checkpoints: INT8 weights, one scale per output
        # channel, 16-bit activations (their model cards: symmetric per-channel weights)
        weights = {"num_bits": 8, "type": "int", "strategy": "channel"}
        return {"quant_method": "compressed-tensors", "ignore": ["lm_head"],
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}}
    if "w4a16" in name:
        return {"quant_method": "compressed-tensors", "ignore": ["lm_head"], "config_groups": {"group_0": {
            "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "group_size": 128}}}}
    if "fp8" in name:
        org = model.strip().split(" (")[0].split("/")[0].lower() if "/" in model else None
        if org == "meta-llama" and "llama-3.1" in name:
            # Meta's own Llama 3.1 FP8 release is fbgemm_fp8 and, as the Llama 3 paper (sec. 6.2)
            # says, leaves self-attention and the first and last layers in 16 bits (the module
            # list needs the layer count: _meta_fp8_unquantized fills it in)
            return {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "modules_to_not_convert": []}
        if name.startswith("qwen3") and name.endswith("-fp8") and org in (None, "qwen"):
            # Qwen's own Qwen3 FP8 releases are "fine-grained fp8 quantization with block size of
            # 128" (their model cards; e.g. Qwen/Qwen3-235B-A22B-FP8's config.json)
            return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                    "weight_block_size": [128, 128]}
        return {"quant_method": "fp8", "activation_scheme": "dynamic"}
    if "awq" in name:
        return {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
    if "gptq" in name:
        return {"quant_method": "gptq", "bits": 8 if "int8" in name else 4, "group_size": 128, "desc_act": False}
    if "bnb-4bit" in name or name.endswith("-4bit"):
        return {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    return None


def _family(model: str) -> Family | None:
    name = base_name(model)
    full = normalize(model)
    for family in FAMILIES:
        if re.search(family.pattern, name) or re.search(family.pattern, full):
            return family
    return None


def config_for(model_id_or_name: str) -> dict | None:
    """config.json for a model id or name, with the quantization its suffix names; None if unknown."""
    family = _family(model_id_or_name)
    if family is None:
        return None
    if isinstance(family.config, str):
        cfg = _example_config(family.config)
        return _with_named_quantization(cfg, model_id_or_name) if _requantized(family, model_id_or_name) else cfg
    cfg = json.loads(json.dumps(family.config))  # deep copy: callers may edit theirs
    return _with_named_quantization(cfg, model_id_or_name)


def saved_dtype(quant: dict | None) -> str | None:
    """The torch_dtype a checkpoint quantized this way is saved with, when the tool fixes it:
    AutoAWQ and AutoGPTQ save float16 (their kernels are fp16), e.g. config.json of
    Qwen/Qwen2.5-7B-Instruct-AWQ and hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4."""
    return "float16" if quant and quant.get("quant_method") in ("awq", "gptq") else None


def _requantized(family: Family, model_id_or_name: str) -> bool:
    """A name stating another quantization than the example checkpoint's own name does."""
    return quantization_for(model_id_or_name) != quantization_for(family.config)


def _with_named_quantization(cfg: dict, model_id_or_name: str) -> dict:
    """The quantization the name states replaces the family's own: a re-quantized upload
    ("gpt-oss-20b-unsloth-bnb-4bit") is not stored the way the original (mxfp4) is."""
    quant = quantization_for(model_id_or_name)
    if quant:
        cfg["quantization_config"] = quant
        cfg["torch_dtype"] = saved_dtype(quant) or cfg.get("torch_dtype")
        if quant["quant_method"] == "fbgemm_fp8":
            quant["modules_to_not_convert"] = _meta_fp8_unquantized(int(cfg["num_hidden_layers"]))
    return cfg


def _meta_fp8_unquantized(layers: int) -> list[str]:
    """Modules Meta's FP8 Llama 3.1 keeps in 16 bits: every self-attention projection, the MLP
    of the first and last layers, and lm_head (Llama 3 paper, arXiv 2407.21783, sec. 6.2)."""
    attention = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(layers) for p in "qkvo"]
    edges = [f"model.layers.{i}.mlp.{p}_proj" for i in (0, layers - 1) for p in ("gate", "up", "down")]
    return attention + edges + ["lm_head"]


def _example_config(name: str) -> dict:
    base, changes = DERIVED.get(name, (name, {}))
    cfg = json.loads((EXAMPLES / base / "config.json").read_text())
    cfg.update(changes)
    return cfg


def total_size_for(model_id_or_name: str) -> int | None:
    """metadata.total_size of the published 16-bit index, when known and the name is not quantized."""
    if quantization_for(model_id_or_name):
        return None
    return TOTAL_SIZES.get(base_name(model_id_or_name))


def _write_modelopt_file(root: Path, model_id: str, cfg: dict) -> None:
    """modelopt exports ship hf_quant_config.json; vLLM reads the algorithm from it. NVIDIA's
    own exports quantize the KV cache to FP8 too (kv_cache_quant_algo "FP8" in all five
    nvidia/* hf_quant_config.json files of shared/reference/configs) and, four times in five,
    leave config.json without a quantization_config; others': not known."""
    quant = cfg.get("quantization_config") or {}
    if quant.get("quant_method") != "modelopt":
        return
    nvidia = model_id.strip().lower().startswith("nvidia/")
    kv_algo = "FP8" if nvidia else None
    if nvidia:
        plain = {k: v for k, v in cfg.items() if k != "quantization_config"}
        (root / "config.json").write_text(json.dumps(plain, indent=1))
    (root / "hf_quant_config.json").write_text(json.dumps({
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": quant["quant_algo"], "kv_cache_quant_algo": kv_algo, "group_size": 16,
                         "exclude_modules": ["lm_head"]}}, indent=1))


def write_checkpoint(directory: str | Path, model_id: str) -> Path:
    """Write model_id's skeleton into directory; KeyError when the model is unknown."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    family = _family(model_id)
    if family is None:
        raise KeyError(f"no published config known for {model_id!r}")
    if isinstance(family.config, str) and family.config not in DERIVED:
        for src in (EXAMPLES / family.config).iterdir():
            shutil.copyfile(src, root / src.name)
        if _requantized(family, model_id):  # the example's index and sizes are not this upload's
            (root / "model.safetensors.index.json").unlink(missing_ok=True)
            cfg = config_for(model_id)
            (root / "config.json").write_text(json.dumps(cfg, indent=1))
            _write_modelopt_file(root, model_id, cfg)
        return root
    if isinstance(family.config, str):  # a derived variant: its config.json only (no index: sizes differ)
        cfg = config_for(model_id)
        (root / "config.json").write_text(json.dumps(cfg, indent=1))
        _write_modelopt_file(root, model_id, cfg)
        return root
    cfg = config_for(model_id)
    (root / "config.json").write_text(json.dumps(cfg, indent=1))
    for name, content in family.files.items():
        (root / name).write_text(json.dumps(content, indent=1))
    _write_modelopt_file(root, model_id, cfg)
    total = total_size_for(model_id)
    if total is not None:
        (root / "model.safetensors.index.json").write_text(json.dumps({
            "metadata": {"total_size": total},
            "weight_map": {"model.embed_tokens.weight": "model-00001-of-00001.safetensors"}}, indent=1))
    return root
