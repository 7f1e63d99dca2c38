"""Measure `servepilot plan` against real vLLM start-up logs ("GPU KV cache size: N tokens").

For each row of kvcache-dev.jsonl (default ../shared/corpus/kvcache-dev.jsonl; pass another
path as the first argument) whose model this script can describe, it writes that model's
checkpoint skeleton into a temp dir (bench/modelzoo.py: published architecture numbers), inspects it, and predicts
the KV tokens twice:

  given   the row's "Available KV cache memory" passed as --kv-cache-memory-bytes (target 1 %)
  gpu     from the GPU, the utilization and the other flags alone            (target 10 %)

Rows with no model, no GPU or no figure to compare are reported as skipped, with the reason.

    python bench/bench_plan.py [path/to/kvcache.jsonl]
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
from servepilot.engines.command import EngineLaunch, ShellContext
from servepilot.errors import ServepilotError
from servepilot.hardware.cluster import Cluster, Gpu
from servepilot.planning import plan_deployment
from servepilot.planning.facts import fact

sys.path.insert(0, str(Path(__file__).resolve().parent))
from modelzoo import config_for, write_checkpoint  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20
DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "kvcache-dev.jsonl"


# nvidia-smi "total" memory per GPU kind, MiB (pattern on the lower-case GPU text).
GPUS: list[tuple[str, str, int]] = [
    (r"a100.*80", "NVIDIA A100-SXM4-80GB", 81920), (r"a100", "NVIDIA A100-SXM4-40GB", 40960),
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
            return Gpu(0, name, None, mib * MiB, _compute_capability(name)), count
    return None, count


def _compute_capability(name: str) -> tuple[int, int] | None:
    from servepilot.hardware.catalog import match_nvml_name

    model = match_nvml_name(name)
    return model.compute_capability if model else None


def version_for(row: dict) -> str | None:
    """The engine version: the row's, else the one its log prints, else by log format."""
    if row.get("engine_version"):
        return str(row["engine_version"])
    log = row.get("log_lines") or ""
    if m := re.search(r"(?:LLM engine \(v|server version )v?([\d.]+)", log):
        return m.group(1).rstrip(".")
    # Else by the log format (the lines each release prints; vllm/worker/worker.py per tag):
    if "Memory profiling results: total_gpu_memory=" in log:
        return "0.6.4"  # the only release with this one-line V0 profile summary
    if re.search(r"# CUDA blocks|non_torch_memory takes", log):
        return "0.7.3"  # V0 summary of 0.6.5 - 0.8 (memory_profiling, executor_base.py)
    if re.search(r"# GPU blocks: \d+\s*$", log, re.M) and "CPU blocks" not in log:
        return "0.7.3"  # V1 before "GPU KV cache size" (PR #13596): the opt-in engine of 0.7.x
    if "VLLM_USE_V1=1" in log or "GPU KV cache size" in log:
        return None  # a V1 log: the planner's assumed version
    if "# GPU blocks" in log:
        return "0.6.0"  # V0 before 0.6.4: all releases 0.4 - 0.6.3 profile alike
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
    # Pasted logs wrap long lines anywhere ("'model': 'Qwe\nn2-7B'"), so the dict form is read with
    # the line breaks removed; the key=value form is read line by line, where removing a break
    # would glue the value to the next line's "INFO".
    flat = log.replace("\n", "")
    for key in _ARG_KEYS:  # 'key': value  (non-default args)  and  key=value  (engine config line)
        m = re.search(r"'" + key + r"':\s*('[^']*'|[\w.]+)", flat) or re.search(r"[ ,(]" + key + r"=([\w.]+)", log)
        if m:
            found[key] = _value(m.group(1))
    if "max_seq_len=" in log and "max_model_len" not in found:
        if m := re.search(r"max_seq_len=(\d+)", log):
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


# Offline use through the Python LLM class (UsageContext.LLM_CLASS gets other batch defaults).
_LLM_CLASS = re.compile(r"\bLLM\(|\[?llm\.py:\d+|benchmark_throughput|from vllm import LLM")


def program_for(row: dict) -> str:
    return "LLM" if _LLM_CLASS.search((row.get("log_lines") or "") + " " + (row.get("notes") or "")) else "vllm serve"


_ENV = re.compile(r"\b(VLLM_USE_V1|VLLM_ATTENTION_BACKEND|VLLM_MLA_DISABLE)=(\w+)")
# Lines only the V0 engine prints: its block count with CPU blocks, its worker's profile summary.
_V0_LINES = re.compile(r"# (?:GPU|cuda) blocks: \d+, # CPU blocks|\[?worker\.py:\d+\]? Memory profiling|"
                       r"model weights take [\d.]+GiB; non_torch_memory")


def env_for(row: dict, version: str | None) -> dict:
    """Engine environment variables the row shows; VLLM_USE_V1=0 where a 0.8+ log is V0's."""
    text = (row.get("log_lines") or "") + " " + (row.get("notes") or "")
    env = dict(_ENV.findall(text))
    if "VLLM_USE_V1" not in env and version and _V0_LINES.search(text):
        from servepilot.planning.common import older

        if not older(version, "0.8.0"):
            env["VLLM_USE_V1"] = "0"
    return env


def predict(spec, gpu: Gpu, count: int, opts: dict, version: str | None, model: str, program: str = "vllm serve",
            env: dict | None = None) -> int:
    launch = EngineLaunch(engine="vllm", argv=("vllm", "serve", model), program=program, model=model,
                          options=opts, engine_version=version, shell=ShellContext(env=dict(env or {})))
    gpus = tuple(Gpu(i, gpu.name, gpu.key, gpu.memory_bytes, gpu.compute_capability) for i in range(max(1, count)))
    dep = Deployment(launch=launch, cluster=Cluster(gpus=gpus, source="flag"), spec=spec)
    return plan_deployment(dep).kv_tokens  # no launch history: the estimate alone


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
            if config_for(model) is None:
                print(f"{rid:58} skipped: no config written for {model!r}")
                continue
            try:
                spec = inspect_path(write_checkpoint(Path(tmp) / re.sub(r"\W+", "_", rid), model))
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
                        {**opts, "kv_cache_memory_bytes": int(row["available_kv_cache_gib"] * GiB)}, version, model,
                        program_for(row), env_for(row, version))
        e = (given - actual) / actual * 100
        given_errs.append(abs(e))
        cells += [f"{given:>10,}", f"{e:>+6.2f}%"]
    else:
        cells += [f"{'-':>10}", f"{'-':>7}"]
    if gpu is not None:
        pred = predict(spec, gpu, count, opts, version, model, program_for(row), env_for(row, version))
        e = (pred - actual) / actual * 100
        gpu_errs.append(abs(e))
        cells += [f"{pred:>10,}", f"{e:>+6.2f}%"]
    else:
        cells += [f"{'-':>10}", "  (GPU not named)"]
    return cells


def report(given_errs, gpu_errs) -> None:
    for label, errs, target in (("given available KV memory", given_errs,
                                 1), ("from GPU and utilization", gpu_errs, 10)):
        if errs:
            within = sum(1 for e in errs if e <= target)
            print(f"{label}: {len(errs)} rows, median |error| {statistics.median(errs):.2f}%, "
                  f"max {max(errs):.2f}%, within {target}%: {within}/{len(errs)}")
        else:
            print(f"{label}: no rows")


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT))
