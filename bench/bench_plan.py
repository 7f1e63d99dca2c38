"""Measure `servepilot plan` against real vLLM start-up logs ("GPU KV cache size: N tokens").

For each row of kvcache-dev.jsonl (default ../shared/corpus/kvcache-dev.jsonl; pass another
path as the first argument) whose model this script can describe, it writes that model's
config.json into a temp dir from published architecture numbers, inspects it, and predicts
the KV tokens twice:

  given   the row's "Available KV cache memory" passed as --kv-cache-memory-bytes (target 1 %)
  gpu     from the GPU, the utilization and the other flags alone            (target 10 %)

Rows with no model, no GPU or no figure to compare are reported as skipped, with the reason.

    /work/venv/bin/python bench/bench_plan.py [path/to/kvcache.jsonl]
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

from servepilot.checkpoint.inspect import inspect_path
from servepilot.deployment import Deployment
from servepilot.engines.launch import EngineLaunch, ShellContext
from servepilot.errors import ServepilotError
from servepilot.hardware.cluster import Cluster, Gpu
from servepilot.planning import plan_deployment
from servepilot.planning.facts import fact

GiB = 1 << 30
MiB = 1 << 20
DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "kvcache-dev.jsonl"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def dense(layers, hidden, heads, kv, inter, vocab, maxpos, *, tie=False, head_dim=None, model_type="llama",
          arch="LlamaForCausalLM", **extra):
    cfg = {"architectures": [arch], "model_type": model_type, "num_hidden_layers": layers, "hidden_size": hidden,
           "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": vocab,
           "max_position_embeddings": maxpos, "tie_word_embeddings": tie, "torch_dtype": "bfloat16"}
    if head_dim:
        cfg["head_dim"] = head_dim
    cfg.update(extra)
    return cfg


def qwen(layers, hidden, heads, kv, inter, vocab, maxpos, **kw):
    return dense(layers, hidden, heads, kv, inter, vocab, maxpos, model_type="qwen2", arch="Qwen2ForCausalLM", **kw)


def qwen3(layers, hidden, heads, kv, inter, maxpos=40960, **kw):
    return dense(layers, hidden, heads, kv, inter, 151936, maxpos, head_dim=128, model_type="qwen3",
                 arch="Qwen3ForCausalLM", **kw)


def qwen3_moe(layers, hidden, heads, kv, experts, topk, moe_inter):
    return dense(layers, hidden, heads, kv, 6144, 151936, 40960, head_dim=128, model_type="qwen3_moe",
                 arch="Qwen3MoeForCausalLM", num_experts=experts, num_experts_per_tok=topk,
                 moe_intermediate_size=moe_inter, decoder_sparse_step=1)


def gemma2(layers, hidden, heads, kv, inter, head_dim):
    return dense(layers, hidden, heads, kv, inter, 256000, 8192, tie=True, head_dim=head_dim, model_type="gemma2",
                 arch="Gemma2ForCausalLM", sliding_window=4096, final_logit_softcapping=30.0,
                 layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)])


def gemma3(layers, hidden, heads, kv, inter, head_dim, *, vocab=262208, maxpos=131072, window=1024):
    # every sixth layer is global (full) attention, the rest slide over `window` tokens
    return dense(layers, hidden, heads, kv, inter, vocab, maxpos, tie=True, head_dim=head_dim, model_type="gemma3_text",
                 arch="Gemma3ForCausalLM", sliding_window=window,
                 layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)])


LLAMA31_8B = dense(32, 4096, 32, 8, 14336, 128256, 131072,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192})
LLAMA31_70B = dense(80, 8192, 64, 8, 28672, 128256, 131072,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192})

# (pattern on the normalized model name, config). Published numbers of each model card's config.json.
MODELS: list[tuple[str, dict]] = [
    (r"llama-2-7b", dense(32, 4096, 32, 32, 11008, 32000, 4096)),
    (r"llama-2-13b", dense(40, 5120, 40, 40, 13824, 32000, 4096)),
    (r"llama-2-70b", dense(80, 8192, 64, 8, 28672, 32000, 4096)),
    (r"llama-3(\.1)?-8b|llama-3\.1-8b|r1-distill-llama-8b", LLAMA31_8B),
    (r"llama-3(\.[13])?-70b|r1-distill-llama-70b", LLAMA31_70B),
    (r"llama-3\.1-405b", dense(126, 16384, 128, 8, 53248, 128256, 131072)),
    (r"llama-3\.2-1b", dense(16, 2048, 32, 8, 8192, 128256, 131072, tie=True, head_dim=64)),
    (r"llama-3\.2-3b", dense(28, 3072, 24, 8, 8192, 128256, 131072, tie=True, head_dim=128)),
    (r"mistral-7b.*v0\.1", dense(32, 4096, 32, 8, 14336, 32000, 32768, model_type="mistral", sliding_window=4096)),
    (r"mistral-7b", dense(32, 4096, 32, 8, 14336, 32768, 32768, model_type="mistral")),
    (r"mixtral-8x7b", dense(32, 4096, 32, 8, 14336, 32000, 32768, model_type="mixtral", arch="MixtralForCausalLM",
                            num_local_experts=8, num_experts_per_tok=2)),
    (r"mixtral-8x22b", dense(56, 6144, 48, 8, 16384, 32768, 65536, model_type="mixtral", arch="MixtralForCausalLM",
                             num_local_experts=8, num_experts_per_tok=2)),
    (r"qwen2(\.5)?-math-1\.5b", qwen(28, 1536, 12, 2, 8960, 151936, 4096, tie=True)),
    (r"qwen2(\.5)?-0\.5b", qwen(24, 896, 14, 2, 4864, 151936, 32768, tie=True)),
    (r"qwen2(\.5)?-1\.5b", qwen(28, 1536, 12, 2, 8960, 151936, 32768, tie=True)),
    (r"qwen2\.5-3b", qwen(36, 2048, 16, 2, 11008, 151936, 32768, tie=True)),
    (r"qwen2(\.5)?(-math)?-7b|r1-distill-qwen-7b", qwen(28, 3584, 28, 4, 18944, 152064, 32768)),
    (r"qwen2\.5-14b|r1-distill-qwen-14b", qwen(48, 5120, 40, 8, 13824, 152064, 32768)),
    (r"qwen2\.5-32b|qwq-32b|r1-distill-qwen-32b", qwen(64, 5120, 40, 8, 27648, 152064, 32768)),
    (r"qwen2(\.5)?-72b", qwen(80, 8192, 64, 8, 29568, 152064, 32768)),
    (r"qwen3-0\.6b", qwen3(28, 1024, 16, 8, 3072, tie_word_embeddings=True)),
    (r"qwen3-1\.7b", qwen3(28, 2048, 16, 8, 6144, tie_word_embeddings=True)),
    (r"qwen3-4b", qwen3(36, 2560, 32, 8, 9728, tie_word_embeddings=True)),
    (r"qwen3-8b", qwen3(36, 4096, 32, 8, 12288)),
    (r"qwen3-14b", qwen3(40, 5120, 40, 8, 17408)),
    (r"qwen3-32b", qwen3(64, 5120, 64, 8, 25600)),
    (r"qwen3(-coder)?-30b-a3b", qwen3_moe(48, 2048, 32, 4, 128, 8, 768)),
    (r"qwen3-235b-a22b", qwen3_moe(94, 4096, 64, 4, 128, 8, 1536)),
    (r"gemma-2-2b", gemma2(26, 2304, 8, 4, 9216, 256)),
    (r"gemma-2-9b", gemma2(42, 3584, 16, 8, 14336, 256)),
    (r"gemma-2-27b", gemma2(46, 4608, 32, 16, 36864, 128)),
    (r"codellama-7b", dense(32, 4096, 32, 32, 11008, 32016, 16384)),
    (r"codellama-13b", dense(40, 5120, 40, 40, 13824, 32016, 16384)),
    (r"codellama-34b", dense(48, 8192, 64, 8, 22016, 32000, 16384)),
    (r"vicuna-7b", dense(32, 4096, 32, 32, 11008, 32000, 4096)),
    (r"vicuna-13b", dense(40, 5120, 40, 40, 13824, 32000, 4096)),
    (r"tinyllama", dense(22, 2048, 32, 4, 5632, 32000, 2048)),
    (r"opt-125m", dense(12, 768, 12, 12, 3072, 50272, 2048, tie=True, model_type="opt", arch="OPTForCausalLM")),
    (r"opt-1\.3b", dense(24, 2048, 32, 32, 8192, 50272, 2048, tie=True, model_type="opt", arch="OPTForCausalLM")),
    (r"opt-6\.7b", dense(32, 4096, 32, 32, 16384, 50272, 2048, tie=True, model_type="opt", arch="OPTForCausalLM")),
    (r"opt-13b", dense(40, 5120, 40, 40, 20480, 50272, 2048, tie=True, model_type="opt", arch="OPTForCausalLM")),
    (r"gemma-2b|gemma-1\.1-2b", dense(18, 2048, 8, 1, 16384, 256000, 8192, tie=True, head_dim=256, model_type="gemma",
                                       arch="GemmaForCausalLM")),
    (r"gemma-7b|gemma-1\.1-7b", dense(28, 3072, 16, 16, 24576, 256000, 8192, tie=True, head_dim=256, model_type="gemma",
                                       arch="GemmaForCausalLM")),
    (r"gemma-3-1b", gemma3(26, 1152, 4, 1, 6912, 256, vocab=262144, maxpos=32768, window=512)),
    (r"gemma-3-4b", gemma3(34, 2560, 8, 4, 10240, 256)),
    (r"gemma-3-12b", gemma3(48, 3840, 16, 8, 15360, 256)),
    (r"gemma-3-27b", gemma3(62, 5376, 32, 16, 21504, 128)),
    (r"phi-4", dense(40, 5120, 40, 10, 17920, 100352, 16384, model_type="phi3", arch="Phi3ForCausalLM")),
    (r"mistral-small", dense(40, 5120, 32, 8, 32768, 131072, 32768, head_dim=128, model_type="mistral")),
    (r"qwen3-coder-480b", dense(62, 6144, 96, 8, 8192, 151936, 262144, head_dim=128, model_type="qwen3_moe",
                                arch="Qwen3MoeForCausalLM", num_experts=160, num_experts_per_tok=8, moe_intermediate_size=2560)),
    (r"glm-4\.5-air", dense(46, 4096, 96, 8, 10944, 151552, 131072, head_dim=128, model_type="glm4_moe",
                            arch="Glm4MoeForCausalLM", n_routed_experts=128, n_shared_experts=1, num_experts_per_tok=8,
                            moe_intermediate_size=1408, first_k_dense_replace=1)),
    (r"glm-4\.[56]", dense(92, 5120, 96, 8, 12288, 151552, 131072, head_dim=128, model_type="glm4_moe",
                           arch="Glm4MoeForCausalLM", n_routed_experts=160, n_shared_experts=1, num_experts_per_tok=8,
                           moe_intermediate_size=1536, first_k_dense_replace=3)),
    (r"phi-3-mini", dense(32, 3072, 32, 32, 8192, 32064, 4096, model_type="phi3", arch="Phi3ForCausalLM")),
    (r"yi-34b", dense(60, 7168, 56, 8, 20480, 64000, 4096)),
    (r"mistral-nemo", dense(40, 5120, 32, 8, 14336, 131072, 1024000, head_dim=128, model_type="mistral")),
]
# Checked-in example checkpoints (config only) for the big families.
EXAMPLE_MODELS = [(r"deepseek-(v3|r1)", "deepseek-v3"), (r"kimi-k2", "kimi-k2.5-nvfp4"), (r"gpt-oss-120b", "gpt-oss-120b")]

# nvidia-smi "total" memory per GPU kind, MiB (pattern on the lower-case GPU text).
GPUS: list[tuple[str, str, int]] = [
    (r"a100.*80", "NVIDIA A100 80GB", 81920), (r"a100", "NVIDIA A100 40GB", 40960),
    (r"(?<!g)h100.*nvl", "NVIDIA H100 NVL", 95830), (r"(?<!g)h100", "NVIDIA H100 80GB HBM3", 81559),
    (r"(?<!g)h200", "NVIDIA H200", 143771), (r"h20\b", "NVIDIA H20", 97871), (r"b200", "NVIDIA B200", 183359),
    (r"l40s|l40\b", "NVIDIA L40S", 46068), (r"\bl4\b", "NVIDIA L4", 23034), (r"a10g|\ba10\b", "NVIDIA A10G", 23028),
    (r"3090", "NVIDIA GeForce RTX 3090", 24576), (r"4090", "NVIDIA GeForce RTX 4090", 24564),
    (r"5090", "NVIDIA GeForce RTX 5090", 32607), (r"pro 6000|pro6000", "NVIDIA RTX PRO 6000 Blackwell", 97887),
    (r"6000 ada|a6000|rtx a6000|\ba40\b", "NVIDIA RTX 6000 Ada Generation", 49140),
    (r"a800", "NVIDIA A800 80GB", 81920), (r"h800", "NVIDIA H800", 81559), (r"gh200", "NVIDIA GH200", 97871),
    (r"\bl20\b", "NVIDIA L20", 46068), (r"\ba30\b", "NVIDIA A30", 24576), (r"a5000", "NVIDIA RTX A5000", 24564),
    (r"a4000", "NVIDIA RTX A4000", 16376), (r"4080", "NVIDIA GeForce RTX 4080", 16376),
    (r"3080", "NVIDIA GeForce RTX 3080", 10240), (r"rtx 8000", "Quadro RTX 8000", 49152),
    (r"\bt4\b", "Tesla T4", 15360), (r"v100.*32", "Tesla V100 32GB", 32768), (r"v100", "Tesla V100 16GB", 16384),
]


def norm_name(model: str) -> str:
    return model.lower().split(" (")[0].split("/")[-1]


def config_for(model: str) -> tuple[dict | None, Path | None]:
    name = norm_name(model)
    for pattern, example in EXAMPLE_MODELS:
        if re.search(pattern, name):
            return None, EXAMPLES / example
    for pattern, cfg in MODELS:
        if re.search(pattern, name):
            cfg = dict(cfg)
            q = quant_for(name)
            if q:
                cfg["quantization_config"] = q
            return cfg, None
    return None, None


def quant_for(name: str) -> dict | None:
    if "w8a8" in name or "int8" in name:
        return {"quant_method": "compressed-tensors", "ignore": ["lm_head"], "config_groups": {"group_0": {
            "weights": {"num_bits": 8, "type": "int"}, "input_activations": {"num_bits": 8, "type": "int"}}}}
    if "fp8" in name:
        return {"quant_method": "fp8", "activation_scheme": "dynamic"}
    if "awq" in name:
        return {"quant_method": "awq", "bits": 4, "group_size": 128}
    if "gptq" in name:
        return {"quant_method": "gptq", "bits": 8 if "int8" in name else 4, "group_size": 128}
    return None


def gpu_for(text: str | None) -> tuple[Gpu | None, int]:
    if not text:
        return None, 0
    low = text.lower()
    m = re.search(r"[x×]\s*(\d+)\b", low) or re.search(r"\b(\d+)\s*[x×]\s*[a-z]", low)
    count = int(m.group(1)) if m else 1
    if m := re.search(r"total_gpu_memory\s*([\d.]+)\s*gib", low):
        # CUDA's own total: add back what the planner takes off for the driver.
        reserved = int(fact("vllm", "driver_reserved_bytes", "0").value)
        return Gpu(0, "GPU", None, int(float(m.group(1)) * GiB) + reserved, None), count
    for pattern, name, mib in GPUS:
        if re.search(pattern, low):
            return Gpu(0, name, None, mib * MiB, None), count
    return None, count


def version_for(row: dict) -> str | None:
    """The engine version: the row's, else the one its log prints, else by log format."""
    if row.get("engine_version"):
        return str(row["engine_version"])
    log = row.get("log_lines") or ""
    if m := re.search(r"(?:LLM engine \(v|server version )v?([\d.]+)", log):
        return m.group(1).rstrip(".")
    if "VLLM_USE_V1=1" in log or "GPU KV cache size" in log:
        return None  # a V1 log: the planner's assumed version
    if "# GPU blocks" in log or "# cuda blocks" in log:
        return "0.6.0"  # V0 log format
    return None


# Engine options the logs show: "non-default args: {...}" (V1), the "with config: ..." line and
# flags of a quoted command line. The row's own fields win over what is parsed here.
_ARG_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "gpu_memory_utilization",
             "kv_cache_dtype", "max_num_seqs", "max_num_batched_tokens", "enforce_eager", "block_size",
             "enable_chunked_prefill", "kv_cache_memory_bytes", "dtype", "enable_expert_parallel")
_FLAGS = {"--tensor-parallel-size": "tensor_parallel_size", "-tp": "tensor_parallel_size",
          "--pipeline-parallel-size": "pipeline_parallel_size", "-pp": "pipeline_parallel_size",
          "--max-model-len": "max_model_len", "--gpu-memory-utilization": "gpu_memory_utilization",
          "--kv-cache-dtype": "kv_cache_dtype", "--max-num-seqs": "max_num_seqs",
          "--max-num-batched-tokens": "max_num_batched_tokens", "--block-size": "block_size", "--dtype": "dtype"}


def _value(text: str):
    text = text.strip().strip("'\"")
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


def options_from_log(log: str) -> dict:
    found: dict = {}
    flat = log.replace("\n", "")
    for key in _ARG_KEYS:  # 'key': value  (non-default args)  and  key=value  (engine config line)
        m = re.search(r"'" + key + r"':\s*('[^']*'|[\w.]+)", flat) or re.search(r"[ ,(]" + key + r"=([\w.]+)", flat)
        if m:
            found[key] = _value(m.group(1))
    if "max_seq_len=" in flat and "max_model_len" not in found:
        if m := re.search(r"max_seq_len=(\d+)", flat):
            found["max_model_len"] = int(m.group(1))
    for flag, dest in _FLAGS.items():
        if m := re.search(r"(?:^|\s)" + re.escape(flag) + r"[ =]([\w.]+)", log):
            found[dest] = _value(m.group(1))
    if re.search(r"(?:^|\s)--enforce-eager\b", log):
        found["enforce_eager"] = True
    return found


def options_for(row: dict) -> dict:
    log = row.get("log_lines") or ""
    opts = options_from_log(log)
    if "enforce_eager=True" in (row.get("notes") or ""):
        opts["enforce_eager"] = True
    if row.get("tp"):
        opts["tensor_parallel_size"] = int(row["tp"])
    if row.get("max_model_len"):
        opts["max_model_len"] = int(row["max_model_len"])
    if row.get("gpu_memory_utilization"):
        opts["gpu_memory_utilization"] = float(row["gpu_memory_utilization"])
    if row.get("kv_cache_dtype"):
        opts["kv_cache_dtype"] = row["kv_cache_dtype"]
    opts.pop("kv_cache_memory_bytes", None)  # the "given" run sets it from the row
    return opts


def predict(spec, gpu: Gpu, count: int, opts: dict, version: str | None, model: str) -> int:
    launch = EngineLaunch(engine="vllm", argv=("vllm", "serve", model), program="vllm serve", model=model,
                          options=opts, engine_version=version, shell=ShellContext())
    gpus = tuple(Gpu(i, gpu.name, gpu.key, gpu.memory_bytes, gpu.compute_capability) for i in range(max(1, count)))
    dep = Deployment(launch=launch, cluster=Cluster(gpus=gpus, source="flag"), spec=spec)
    return plan_deployment(dep, use_measured=False).kv_tokens


def main(path: Path) -> int:
    if not path.exists():
        print(f"no corpus at {path}: nothing to measure")
        return 0
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    given_errs, gpu_errs = [], []
    print(f"{'row':58} {'actual':>10} {'given':>10} {'err':>7} {'gpu-only':>10} {'err':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            rid = row["id"][:58]
            actual = row.get("gpu_kv_cache_tokens")
            model = row.get("model")
            if not model or not actual:
                print(f"{rid:58} skipped: {'no model named' if not model else 'no token count'}")
                continue
            cfg, example = config_for(model)
            if cfg is None and example is None:
                print(f"{rid:58} skipped: no config written for {model!r}")
                continue
            if cfg is not None:
                d = Path(tmp) / re.sub(r"\W+", "_", rid)
                d.mkdir()
                (d / "config.json").write_text(json.dumps(cfg))
                example = d
            try:
                spec = inspect_path(example)
                cells = measure(row, spec, actual, model, given_errs, gpu_errs)
            except ServepilotError as exc:
                print(f"{rid:58} error: {exc.one_line()}")
                continue
            print(f"{rid:58} {actual:>10,} " + " ".join(cells))
    report(given_errs, gpu_errs)
    return 0


def measure(row, spec, actual, model, given_errs, gpu_errs) -> list[str]:
    """Both predictions for one row: the table cells; the errors are appended to the lists."""
    opts = options_for(row)
    version = version_for(row)
    gpu, count = gpu_for(row.get("gpu"))
    world = int(opts.get("tensor_parallel_size") or 1) * int(opts.get("pipeline_parallel_size") or 1)
    count = max(count, world)
    cells = []
    if row.get("available_kv_cache_gib") is not None:
        # The log prints GiB to 2 decimals: the planner gets that figure and no more.
        given = predict(spec, gpu or Gpu(0, "GPU", None, 80 * GiB, None), count,
                        {**opts, "kv_cache_memory_bytes": int(row["available_kv_cache_gib"] * GiB)}, version, model)
        e = (given - actual) / actual * 100
        given_errs.append(abs(e))
        cells += [f"{given:>10,}", f"{e:>+6.2f}%"]
    else:
        cells += [f"{'-':>10}", f"{'-':>7}"]
    if gpu is not None:
        pred = predict(spec, gpu, count, opts, version, model)
        e = (pred - actual) / actual * 100
        gpu_errs.append(abs(e))
        cells += [f"{pred:>10,}", f"{e:>+6.2f}%"]
    else:
        cells += [f"{'-':>10}", "  (GPU not named)"]
    return cells


def report(given_errs, gpu_errs) -> None:
    for label, errs, target in (("given available KV memory", given_errs, 1), ("from GPU and utilization", gpu_errs, 10)):
        if errs:
            within = sum(1 for e in errs if e <= target)
            print(f"{label}: {len(errs)} rows, median |error| {statistics.median(errs):.2f}%, "
                  f"max {max(errs):.2f}%, within {target}%: {within}/{len(errs)}")
        else:
            print(f"{label}: no rows")


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT))
