"""Benchmark `servepilot inspect` on the skeleton of a 1-trillion-parameter checkpoint.

Prints figures; it is not a test. Run: `python bench/bench_inspect.py [--keep DIR]`.

The skeleton is 119 sparse shard files whose safetensors headers list a Kimi-K2-like tensor
set (61 layers, MLA attention in BF16, 384 routed experts per MoE layer in NVFP4: a U8 tensor
packing two 4-bit weights per byte, an F8_E4M3 scale per 16 weights and two F32 scalars), so
each header is as big as the real one while the files take no disk space.

Figures reported (targets from issue 2):
  inspect       `servepilot inspect DIR --json` wall time, a fresh process (< 1 s on 2 cores)
  floor         read + json.loads of the same 119 headers, in this process (inspect <= 2x)
  safe_open     safetensors.safe_open + keys() over the 119 shards, for comparison
  --version     `servepilot --version` start-up time (< 0.3 s)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYERS = 61
EXPERTS = 384
HIDDEN = 7168
MOE_INTER = 2048
DENSE_INTER = 18432
HEADS = 64
Q_LORA, KV_LORA, ROPE, NOPE, V_DIM = 1536, 512, 64, 128, 128
VOCAB = 163840
SHARDS = 119
NVFP4_GROUP = 16  # one F8_E4M3 scale per 16 weights (modelopt NVFP4)

BYTES = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}


def kimi_like_tensors() -> list[tuple[str, str, list[int]]]:
    """(name, dtype, shape) of every tensor, in checkpoint order."""
    out: list[tuple[str, str, list[int]]] = [("model.embed_tokens.weight", "BF16", [VOCAB, HIDDEN])]

    def bf16(name, *shape):
        out.append((name, "BF16", list(shape)))

    def nvfp4(base, rows, cols):
        out.append((f"{base}.weight", "U8", [rows, cols // 2]))
        out.append((f"{base}.weight_scale", "F8_E4M3", [rows, cols // NVFP4_GROUP]))
        out.append((f"{base}.weight_scale_2", "F32", []))
        out.append((f"{base}.input_scale", "F32", []))

    for i in range(LAYERS):
        p = f"model.layers.{i}"
        bf16(f"{p}.input_layernorm.weight", HIDDEN)
        bf16(f"{p}.post_attention_layernorm.weight", HIDDEN)
        bf16(f"{p}.self_attn.q_a_proj.weight", Q_LORA, HIDDEN)
        bf16(f"{p}.self_attn.q_a_layernorm.weight", Q_LORA)
        bf16(f"{p}.self_attn.q_b_proj.weight", HEADS * (NOPE + ROPE), Q_LORA)
        bf16(f"{p}.self_attn.kv_a_proj_with_mqa.weight", KV_LORA + ROPE, HIDDEN)
        bf16(f"{p}.self_attn.kv_a_layernorm.weight", KV_LORA)
        bf16(f"{p}.self_attn.kv_b_proj.weight", HEADS * (NOPE + V_DIM), KV_LORA)
        bf16(f"{p}.self_attn.o_proj.weight", HIDDEN, HEADS * V_DIM)
        if i == 0:  # first_k_dense_replace = 1
            for n, (r, c) in {"gate_proj": (DENSE_INTER, HIDDEN), "up_proj": (DENSE_INTER, HIDDEN),
                              "down_proj": (HIDDEN, DENSE_INTER)}.items():
                bf16(f"{p}.mlp.{n}.weight", r, c)
            continue
        bf16(f"{p}.mlp.gate.weight", EXPERTS, HIDDEN)
        out.append((f"{p}.mlp.gate.e_score_correction_bias", "F32", [EXPERTS]))
        for n, (r, c) in {"gate_proj": (MOE_INTER, HIDDEN), "up_proj": (MOE_INTER, HIDDEN),
                          "down_proj": (HIDDEN, MOE_INTER)}.items():
            bf16(f"{p}.mlp.shared_experts.{n}.weight", r, c)
        for e in range(EXPERTS):
            nvfp4(f"{p}.mlp.experts.{e}.gate_proj", MOE_INTER, HIDDEN)
            nvfp4(f"{p}.mlp.experts.{e}.up_proj", MOE_INTER, HIDDEN)
            nvfp4(f"{p}.mlp.experts.{e}.down_proj", HIDDEN, MOE_INTER)
    bf16("model.norm.weight", HIDDEN)
    bf16("lm_head.weight", VOCAB, HIDDEN)
    return out


def nbytes(dtype: str, shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * BYTES[dtype]


def write_skeleton(root: Path) -> int:
    """Write config.json, the index and 119 sparse shards; return the logical weight count."""
    tensors = kimi_like_tensors()
    per = -(-len(tensors) // SHARDS)
    weight_map, total, logical = {}, 0, 0
    for s in range(SHARDS):
        name = f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for t, dtype, shape in tensors[s * per:(s + 1) * per]:
            size = nbytes(dtype, shape)
            header[t] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
            weight_map[t] = name
            logical += size * 2 if dtype == "U8" else (size // BYTES[dtype])
        blob = json.dumps(header, separators=(",", ":")).encode()
        blob += b" " * (-len(blob) % 8)  # safetensors pads the header to 8 bytes
        with open(root / name, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            f.truncate(8 + len(blob) + offset)  # sparse: the tensor bytes take no disk space
        total += offset
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    (root / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": DENSE_INTER,
        "moe_intermediate_size": MOE_INTER, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "n_routed_experts": EXPERTS,
        "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
        "kv_lora_rank": KV_LORA, "q_lora_rank": Q_LORA, "qk_rope_head_dim": ROPE,
        "qk_nope_head_dim": NOPE, "v_head_dim": V_DIM, "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
                                "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
                                    "num_bits": 4, "type": "float", "group_size": 16}}}},
    }))
    return logical


def floor_read_and_parse(root: Path) -> float:
    t0, c0 = time.perf_counter(), time.process_time()
    for p in sorted(root.glob("*.safetensors")):
        with open(p, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            json.loads(f.read(n))
    CPU_SECONDS["floor"] = min(CPU_SECONDS.get("floor", 1e9), time.process_time() - c0)
    return time.perf_counter() - t0


def safe_open_time(root: Path) -> float | None:
    try:
        from safetensors import safe_open
    except ImportError:
        return None
    t0 = time.perf_counter()
    for p in sorted(root.glob("*.safetensors")):
        with safe_open(str(p), framework="numpy") as f:
            list(f.keys())
    return time.perf_counter() - t0


CPU_SECONDS: dict[str, float] = {}


def cli_time(args: list[str], *, one_process: bool = False) -> tuple[float, str]:
    """Wall time of one `servepilot ARGS` process; its CPU time (with any child it forked)
    is kept in CPU_SECONDS, the best seen per command, which other load cannot inflate much.
    one_process=True switches off the two-process header reading, for comparison."""
    # The console script's own entry point, run the way the installed `servepilot` runs it.
    serial = "from servepilot.checkpoint import parallel; parallel.MIN_SHARDS = 10**9; " if one_process else ""
    exe = [sys.executable, "-c", serial + "from servepilot.cli.main import run; run()"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(exe + args, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    key = " ".join(args[:1]) + (" (1 process)" if one_process else "")
    CPU_SECONDS[key] = min(CPU_SECONDS.get(key, cpu), cpu)
    if out.returncode != 0:
        raise SystemExit(f"servepilot {' '.join(args)} failed: {out.stderr.strip()}")
    return dt, out.stdout


def best_of(n: int, fn) -> float:
    return min(fn() for _ in range(n))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="write the skeleton here and keep it")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is shown")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        logical = write_skeleton(root)
        header_mb = sum(_header_len(p) for p in root.glob("*.safetensors")) / 1e6
        print(f"skeleton: {SHARDS} shards, {logical / 1e12:.3f} T weights, "
              f"{header_mb:.1f} MB of headers, written in {time.perf_counter() - t0:.1f} s")
        print(f"cores: {os.cpu_count()}")

        floor = best_of(args.repeat, lambda: floor_read_and_parse(root))
        inspect = best_of(args.repeat, lambda: cli_time(["inspect", str(root), "--json"])[0])
        inspect_1p = best_of(args.repeat, lambda: cli_time(["inspect", str(root), "--json"], one_process=True)[0])
        version = best_of(args.repeat, lambda: cli_time(["--version"])[0])
        safe = best_of(args.repeat, lambda: safe_open_time(root) or float("nan"))
        spec = json.loads(cli_time(["inspect", str(root), "--json"])[1])["model"]["weights"]

        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (other work on the machine slows every "
              "figure)")
        print(f"inspect   {inspect:7.3f} s   (target < 1 s; {inspect / floor:.2f}x the floor, target <= 2x; "
              f"CPU {CPU_SECONDS['inspect']:.3f} s in all processes)")
        print(f"  1 proc  {inspect_1p:7.3f} s   (the same without the forked helper; {inspect_1p / floor:.2f}x the "
              "floor; "
              f"CPU {CPU_SECONDS['inspect (1 process)']:.3f} s)")
        print(f"floor     {floor:7.3f} s   (read + json.loads of the 119 headers; CPU {CPU_SECONDS['floor']:.3f} s)")
        print(f"safe_open {safe:7.3f} s   (safetensors.safe_open + keys())")
        print(f"--version {version:7.3f} s   (target < 0.3 s)")
        print(f"inspect saw: source={spec['source']} shards={spec['shards']} "
              f"total_bytes={spec['total_bytes']:,} elements={spec['total_params']:,}")
        print(f"(best of {args.repeat} runs each)")


def _header_len(p: Path) -> int:
    with open(p, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


if __name__ == "__main__":
    main()
