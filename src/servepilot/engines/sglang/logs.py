"""SGLang start-up log lines: load phases, measured figures and fatal lines, as data.

Same row shape as engines/vllm/logs.py. Sources read in the sglang 0.5.6 sdist.
"""

ENGINE = "sglang"
# python -m sglang.launch_server listens on 30000 by default (ServerArgs.port).
DEFAULT_PORT = 30000

PHASES = (
    {
        "phase": "init",
        "needle": "Init torch distributed begin",
        "regex": r"Init torch distributed begin",
        "versions": ">=0.4",
        "source": "sglang/srt/model_executor/model_runner.py@v0.5.6",
    },
    {
        "phase": "weights",
        "needle": "Load weight begin",
        "regex": r"Load weight begin",
        "versions": ">=0.4",
        "source": "sglang/srt/model_executor/model_runner.py@v0.5.6",
    },
    {
        "phase": "weights",
        "needle": "Loading safetensors checkpoint shards",
        "regex": r"Loading safetensors checkpoint shards:\s*(?P<percent>\d+)% Completed "
        r"\|\s*(?P<shard>\d+)/(?P<shards>\d+)",
        "versions": ">=0.4",
        "source": "sglang/srt/model_loader/weight_utils.py@v0.5.6 (_BAR_FORMAT)",
    },
    {
        # SGLang's "GB" are GiB: get_available_gpu_memory divides by 1 << 30.
        "phase": "weights",
        "needle": "Load weight end",
        "regex": r"Load weight end\..*mem usage=(?P<weights_bytes>[\d.]+) GB",
        "units": {"weights_bytes": "GiB"},
        "versions": ">=0.4",
        "source": "sglang/srt/model_executor/model_runner.py@v0.5.6",
    },
    {
        "phase": "kv_cache",
        "needle": "KV Cache is allocated",
        "regex": r"KV Cache is allocated\. #tokens: (?P<kv_tokens>\d+)",
        "versions": ">=0.4",
        "source": "sglang/srt/mem_cache/memory_pool.py@v0.5.6",
    },
    {
        "phase": "kv_cache",
        "needle": "max_total_num_tokens=",
        # possessive \d++: no backtracking into a long digit run before the lazy .*? (linear time)
        "regex": (
            r"max_total_num_tokens=(?P<kv_tokens>\d++).*?"
            r"max_running_requests=(?P<max_concurrency>\d++).*?"
            r"context_len=(?P<max_model_len>\d+)"
        ),
        "versions": ">=0.4",
        "source": "sglang/srt/managers/scheduler.py@v0.5.6",
    },
    {
        "phase": "cuda_graphs",
        "needle": "Capture cuda graph",
        "regex": r"Capture cuda graph (bs|num tokens)",
        "versions": ">=0.4",
        "source": "sglang/srt/model_executor/cuda_graph_runner.py@v0.5.6",
    },
    {
        "phase": "server",
        "needle": "Application startup complete",
        "regex": r"Application startup complete",
        "versions": ">=0.4",
        "source": "uvicorn/lifespan/on.py (uvicorn>=0.20)",
    },
    {
        "phase": "server",
        "needle": "fired up and ready to roll",
        "regex": r"The server is fired up and ready to roll",
        "versions": ">=0.4",
        "source": "sglang/srt/entrypoints/http_server.py@v0.5.6",
    },
)

FATAL = (
    {
        "needle": "Capture cuda graph failed",
        "regex": r"Capture cuda graph failed",
        "versions": ">=0.4",
        "source": "sglang/srt/model_executor/cuda_graph_runner.py@v0.5.6",
    },
    {
        "needle": "CUDA out of memory",
        "regex": r"(torch\.OutOfMemoryError|torch\.cuda\.OutOfMemoryError).*CUDA out of memory",
        "versions": ">=0.4",
        "source": "torch/cuda/memory.py (torch>=2.1)",
    },
)

# ---- start-up markers that triage reads (see engines/vllm/logs.py) ----
BANNERS = (
    ("sglang_server_args", r"server_args=ServerArgs\(", "sglang/srt/server_args.py (logged at launch)"),
)
READY = (r"The server is fired up",)  # sglang/srt/entrypoints/http_server.py
# SGLang names every capture "Capture <what> begin" / "... end": "Capture cuda graph begin"
# (model_runner.py@v0.3.6, @v0.4.5.post3), "Capture {cuda,npu,cpu} graph begin" and "Capture
# piecewise CUDA graph begin" (@v0.5.9), the drafts' "Capture draft [extend] cuda graph begin
# (step N)" (speculative/eagle_worker.py@v0.4.5.post3, @v0.5.9), "Capture UNO tree draft CUDA graph
# begin" and "Capture single-CG draft extend begin" (speculative/*@v0.5.23): one pattern takes
# any words between "Capture" and a graph word ("graph", "CG"), then "begin" or "end". With
# delayed weights (startup_weight_load.py@v0.5.23) the real weights are committed after capture.
_CAPTURE = r"Capture [\w -]{0,60}?(?:[Gg]raph|CG)\b[\w -]{0,40}?\b"
STAGES = (
    ("after_cuda_graph_capture",
     _CAPTURE + r"end\b|Committed real weights after CUDA graph capture",
     "sglang/srt/model_executor/cuda_graph_runner.py@v0.4.3; model_runner.py@v0.5.9;"
     " speculative/eagle_worker_v2.py@v0.5.23; startup_weight_load.py@v0.5.23"),
    ("cuda_graph_capture", _CAPTURE + r"begin\b|Capturing (?:batches|num tokens) \(",
     "sglang/srt/model_executor/cuda_graph_runner.py@v0.4.3; model_runner.py@v0.5.9;"
     " speculative/eagle_worker.py@v0.5.9; speculative/uno_worker_v2.py@v0.5.23; newer"
     " lines ('Capture target prefill CUDA graph begin', 'Capturing num tokens (')"
     " https://github.com/sostrowsk/dgx-spark-local-llm sglang-versuch1.log,"
     " https://github.com/sgl-project/sglang/pull/11275"),
    # "Load weight end": the weights are in, the memory pool comes next
    ("kv_cache_profiling", r"Load weight end|KV Cache is allocated|Memory pool (?:end|begin)|Init memory pool",
     "sglang/srt/model_executor/model_runner.py@v0.4.3"),
    ("weights_loading", r"Load weight begin", "sglang/srt/model_executor/model_runner.py@v0.4.3"),
)
LOG_HINT = rb"sglang|server_args=ServerArgs|The server is fired up"
LOG_HINT_ORDER = 1
