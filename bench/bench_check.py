"""Measure `servepilot check` against real launch failures (failures-dev.jsonl).

For each row (default ../shared/corpus/failures-dev.jsonl; pass another path as the first
argument) whose model this script can describe and whose GPU is in the catalog, it writes
the model's config.json into a temp dir from published architecture numbers (or uses the
repository's examples/), rebuilds the command line (the row's own command when it has one),
runs `check` through build_deployment + run_checks, and compares the category of the first
finding (errors first) with the row's category. Rows it cannot build are listed with why.

    /work/venv/bin/python bench/bench_check.py [path/to/failures.jsonl]
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

from servepilot.checks import run_checks
from servepilot.deployment import build_deployment
from servepilot.errors import ServepilotError

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "failures-dev.jsonl"
# published config.json / hf_quant_config.json files, named "org--name_config.json"
REFERENCE_CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "reference" / "configs"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

MLA_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
          "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
          "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
          "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
          "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
          "torch_dtype": "bfloat16"}


def dense(arch, model_type, layers, hidden, heads, kv, inter, vocab, maxpos, **extra) -> dict:
    cfg = {"architectures": [arch], "model_type": model_type, "num_hidden_layers": layers, "hidden_size": hidden,
           "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": vocab,
           "max_position_embeddings": maxpos, "torch_dtype": "bfloat16"}
    cfg.update(extra)
    return cfg


# model name (substring of the row's "model") -> files of a config-only checkpoint, from the
# published configs of those repositories
MODELS: dict[str, dict] = {
    "DeepSeek-V3.2": {"config.json": dict(MLA_V3, architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32", index_topk=2048),
                      "tokenizer_config.json": {"tokenizer_class": "LlamaTokenizerFast"}, "total": 689 * 10**9},
    "Qwen1.5-7B-Chat-GPTQ-Int4": {"config.json": dense("Qwen2ForCausalLM", "qwen2", 32, 4096, 32, 32, 11008, 151936, 32768,
                                                       quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}),
                                  "total": 5_860_000_000},
    "Qwen1.5-32B-Chat-AWQ": {"config.json": dense("Qwen2ForCausalLM", "qwen2", 64, 5120, 40, 8, 27392, 152064, 32768,
                                                  quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}),
                             "total": 19_300_000_000},
    "InternVL2-8B": {"config.json": {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat",
                                     "auto_map": {"AutoConfig": "configuration_internvl_chat.InternVLChatConfig",
                                                  "AutoModel": "modeling_internvl_chat.InternVLChatModel"},
                                     "llm_config": dense("InternLM2ForCausalLM", "internlm2", 32, 4096, 32, 8, 14336, 92553, 32768),
                                     "torch_dtype": "bfloat16"},
                     "configuration_internvl_chat.py": "# custom code\n", "modeling_internvl_chat.py": "# custom code\n",
                     "total": 16_150_000_000},
    "DeepSeek-R1-Distill-Qwen-7B": {"config.json": dense("Qwen2ForCausalLM", "qwen2", 28, 3584, 28, 4, 18944, 152064, 131072),
                                    "total": 15_230_000_000},
    "Qwen3-Coder-480B-A35B-Instruct-FP8": {"config.json": dense("Qwen3MoeForCausalLM", "qwen3_moe", 62, 6144, 96, 8, 8192, 151936, 262144,
                                                                head_dim=128, num_experts=160, num_experts_per_tok=8, moe_intermediate_size=2560,
                                                                quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}),
                                           "total": 482_000_000_000},
    "Qwen3 (Qwen3ForCausalLM)": {"config.json": dense("Qwen3ForCausalLM", "qwen3", 36, 4096, 32, 8, 12288, 151936, 40960, head_dim=128),
                                 "total": 16_380_000_000},
    "openai/gpt-oss": {"example": "gpt-oss-120b"},
    "Kimi-K2.5-NVFP4": {"example": "kimi-k2.5-nvfp4"},
    "Qwen3-235B-A22B-NVFP4": {"example": "qwen3-235b-a22b-nvfp4"},
    "Llama-3.1-8B": {"example": "llama-3.1-8b"},
    "DeepSeek-V3": {"example": "deepseek-v3"},
}


def reference_model(model: str | None) -> dict | None:
    """A model named by its Hugging Face id whose published config is in shared/reference/configs."""
    if not model or not REFERENCE_CONFIGS.is_dir():
        return None
    for token in re.findall(r"[\w.-]+/[\w.-]+", model):
        stem = token.replace("/", "--")
        config = REFERENCE_CONFIGS / f"{stem}_config.json"
        if config.is_file():
            files = {"config.json": json.loads(config.read_text())}
            hfq = REFERENCE_CONFIGS / f"{stem}_hf_quant_config.json"
            if hfq.is_file():
                files["hf_quant_config.json"] = json.loads(hfq.read_text())
            return files
    return None

# catalog aliases by the names reporters write
GPUS = [(r"rtx pro 6000", "rtx-pro-6000"), (r"h200", "h200"), (r"h100", "h100"), (r"\bh20\b", "h20"), (r"rtx 3090", "rtx-3090"),
        (r"v100", "v100"), (r"a10g", "a10g"), (r"l40s", "l40s"), (r"a100", "a100"), (r"rtx 4090", "rtx-4090"),
        (r"rtx 5090", "rtx-5090"), (r"\bb200\b", "b200"), (r"\bgb200\b", "gb200"), (r"\bl4\b", "l4"), (r"\bt4\b", "t4"),
        (r"rtx 6000 ada", "rtx-6000-ada")]


def gpu_flag(text: str | None) -> str | None:
    if not text:
        return None
    low = text.lower()
    for pattern, alias in GPUS:
        if re.search(pattern, low):
            m = re.search(r"(?<![a-z0-9])x\s?(\d{1,2})\b|tp\s*=\s*(\d+)|(\d+)\s*gpus?", low)
            n = next((g for g in (m.groups() if m else ()) if g), "1")
            return f"{alias}x{n}"
    return None


def engine_version(text: str | None) -> str | None:
    m = re.match(r"\s*v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+)?(?:\.dev\d+)?)", text or "")
    return m.group(1) if m else None


def command(row: dict, model_path: Path) -> list[str] | None:
    flags = (row.get("flags") or "").splitlines()
    for line in flags:
        m = re.search(r"(vllm serve|python3? -m vllm\.entrypoints\.openai\.api_server)(.*)", line)
        if m:
            try:
                argv = shlex.split(m.group(0).replace("\\", " "))
            except ValueError:
                return None
            out, skip = [], False
            for i, tok in enumerate(argv):
                if skip:
                    skip = False
                    continue
                if tok in ("--model",):
                    skip = True
                    continue
                if tok.startswith("$") or tok.startswith("[") or tok.startswith('"$'):
                    break
                if i == 2 and argv[:2] == ["vllm", "serve"]:
                    continue  # the row's own model path
                out.append(tok)
            if out[:2] == ["vllm", "serve"]:
                return ["vllm", "serve", str(model_path)] + out[2:]
            return out + ["--model", str(model_path)]
    argv = ["vllm", "serve", str(model_path)]
    text = (row.get("flags") or "").split("(")[0]
    argv += [t for t in shlex.split(text) if t.startswith("--") or not t.startswith("-")] if text.strip().startswith("--") else []
    m = re.search(r"tp\s*=\s*(\d+)|tensor_parallel_size\D{0,3}(\d+)", f"{row.get('gpu')} {row.get('flags')}".lower())
    if m and "--tensor-parallel-size" not in argv:
        argv += ["--tensor-parallel-size", next(g for g in m.groups() if g)]
    return argv


def sglang_command(row: dict, model_path: Path) -> list[str]:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", str(model_path)]
    m = re.search(r"tp\s*=\s*(\d+)|--tp(?:-size)?\s+(\d+)", f"{row.get('gpu')} {row.get('flags')}".lower())
    if m:
        argv += ["--tp-size", next(g for g in m.groups() if g)]
    return argv


def write_model(root: Path, row_id: str, files: dict) -> Path:
    if "example" in files:
        return EXAMPLES / files["example"]
    path = root / row_id
    path.mkdir(parents=True)
    for fname, content in files.items():
        if fname == "total":
            continue
        (path / fname).write_text(content if isinstance(content, str) else json.dumps(content, indent=1))
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": files.get("total", 0)}, "weight_map": {}}))
    return path


def main(argv: list[str]) -> int:
    corpus = Path(argv[1]) if len(argv) > 1 else DEFAULT
    rows = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    results, skipped = [], []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            if row["engine"] not in ("vllm", "sglang"):
                skipped.append((row["id"], f"engine {row['engine']}: needs a GGUF file, not rebuilt"))
                continue
            # an exact published config first, then the hand-described families
            files = reference_model(row.get("model"))
            if files is None:
                name = next((k for k in MODELS if k in (row.get("model") or "")), None)
                files = MODELS[name] if name else None
            if files is None:
                skipped.append((row["id"], f"model not described: {row.get('model')!r}"))
                continue
            path = write_model(Path(tmp), row["id"], files)
            cmd = command(row, path) if row["engine"] == "vllm" else sglang_command(row, path)
            gpu = gpu_flag(row.get("gpu"))
            version = engine_version(row.get("engine_version"))
            try:
                try:
                    dep = build_deployment(command=cmd, gpu=gpu, engine_version=version, probe=False)
                except ServepilotError:
                    # the row's own command is malformed (e.g. `vllm server`): check the model alone
                    dep = build_deployment(command=["vllm", "serve", str(path)], gpu=gpu, engine_version=version, probe=False)
                result = run_checks(dep)
            except ServepilotError as exc:
                skipped.append((row["id"], f"not buildable: {exc.one_line()}"))
                continue
            top = result.findings[0] if result.findings and result.findings[0].severity != "info" else None
            any_match = any(f.category == row["category"] for f in result.findings)
            results.append((row, top, any_match, gpu, result.resolved.get("engine_version")))
    elapsed = time.perf_counter() - started
    right = sum(1 for row, top, _, _, _ in results if top is not None and top.category == row["category"])
    anywhere = sum(1 for *_, any_match, _, _ in results if any_match)
    print(f"{'row':58} {'expected':20} {'predicted (first finding)':38} gpu / version")
    for row, top, any_match, gpu, version in results:
        mark = "OK " if top is not None and top.category == row["category"] else ("~  " if any_match else "-- ")
        pred = f"{top.category} {top.code} ({top.severity})" if top else "pass (no finding)"
        print(f"{mark}{row['id'][:55]:55} {row['category']:20} {pred:38} {gpu} / {version}")
    print(f"\nbuilt {len(results)} of {len(rows)} rows; first finding in the right category: {right}/{len(results)}; "
          f"right category among all findings: {anywhere}/{len(results)}; {elapsed:.1f} s")
    print("\nskipped:")
    for rid, why in skipped:
        print(f"  {rid}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
