"""vLLM start-up log lines: load phases, measured figures and fatal lines, as data.

Each row: `needle` (a literal that must appear in the line; a cheap prefilter so the
supervisor runs regexes only on the few lines that can match), `regex` (named groups are
figures, see runs/phases.py for their units), `phase` (the load phase the line starts),
`versions` (PEP 440 range the format was read at) and `source` (where the text is printed).
"""

ENGINE = "vllm"
# `vllm serve` and the OpenAI api_server listen on 8000 unless --port says otherwise.
DEFAULT_PORT = 8000

PHASES = (
    {
        "phase": "init",
        "needle": "Initializing a V1 LLM engine",
        "regex": r"Initializing a V1 LLM engine \(v(?P<engine_version>[^)\s]+)\)",
        "versions": ">=0.8",
        "source": "vllm/v1/engine/core.py@v0.16.0",
    },
    {
        "phase": "weights",
        "needle": "Starting to load model",
        "regex": r"Starting to load model",
        "versions": ">=0.8",
        "source": "vllm/v1/worker/gpu_model_runner.py@v0.16.0",
    },
    {
        # tqdm with bar_format "{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} ...";
        # tqdm redraws with carriage returns, so each update is its own \r-separated record.
        "phase": "weights",
        "needle": "Loading safetensors checkpoint shards",
        "regex": r"Loading safetensors checkpoint shards:\s*(?P<percent>\d+)% Completed "
                 r"\|\s*(?P<shard>\d+)/(?P<shards>\d+)",
        "versions": ">=0.4",
        "source": "vllm/model_executor/model_loader/weight_utils.py@v0.16.0 (_BAR_FORMAT)",
    },
    {
        "phase": "weights",
        "needle": "Model loading took",
        "regex": r"Model loading took (?P<weights_bytes>[\d.]+) ?GiB",
        "units": {"weights_bytes": "GiB"},
        "versions": ">=0.8",
        "source": "vllm/v1/worker/gpu_model_runner.py@v0.16.0",
    },
    {
        "phase": "profiling",
        "needle": "Dynamo bytecode transform time",
        "regex": r"Dynamo bytecode transform time",
        "versions": ">=0.8",
        "source": "vllm/compilation/backends.py@v0.16.0",
    },
    {
        "phase": "profiling",
        "needle": "torch.compile takes",
        "regex": r"torch\.compile takes [\d.]+ s in total",
        "versions": ">=0.8",
        "source": "vllm/compilation/monitor.py@v0.16.0",
    },
    {
        "phase": "kv_cache",
        "needle": "Available KV cache memory",
        "regex": r"Available KV cache memory: (?P<available_kv_bytes>[\d.]+) GiB",
        "units": {"available_kv_bytes": "GiB"},
        "versions": ">=0.8",
        "source": "vllm/v1/worker/gpu_worker.py@v0.16.0",
    },
    {
        # v0.16.0 prints the tokens and the concurrency on two lines; later versions merge
        # them into "GPU KV cache size: N tokens, Maximum concurrency for L tokens ...".
        "phase": "kv_cache",
        "needle": "KV cache size:",
        "regex": r"KV cache size: (?P<kv_tokens>[\d,]+) tokens",
        "versions": ">=0.8",
        "source": "vllm/v1/core/kv_cache_utils.py@v0.16.0 (_report_kv_cache_config)",
    },
    {
        "phase": "kv_cache",
        "needle": "Maximum concurrency for",
        "regex": r"Maximum concurrency for (?P<max_model_len>[\d,]+) tokens per request: (?P<max_concurrency>[\d.]+)x",
        "versions": ">=0.8",
        "source": "vllm/v1/core/kv_cache_utils.py@v0.16.0",
    },
    {
        "phase": "cuda_graphs",
        "needle": "Capturing CUDA graph",
        "regex": r"Capturing CUDA graphs?",
        "versions": ">=0.8",
        "source": "vllm/v1/worker/gpu_model_runner.py@v0.16.0 (tqdm desc)",
    },
    {
        "phase": "cuda_graphs",
        "needle": "Graph capturing finished",
        "regex": r"Graph capturing finished in [\d.]+ secs",
        "versions": ">=0.8",
        "source": "vllm/v1/worker/gpu_model_runner.py@v0.16.0",
    },
    {
        "phase": "server",
        "needle": "Starting vLLM API server",
        "regex": r"Starting vLLM API server",
        "versions": ">=0.8",
        "source": "vllm/entrypoints/openai/api_server.py@v0.16.0",
    },
    {
        # uvicorn prints this before it binds the socket, so it is a hint to probe now,
        # never proof of readiness (the HTTP probe decides).
        "phase": "server",
        "needle": "Application startup complete",
        "regex": r"Application startup complete",
        "versions": ">=0.4",
        "source": "uvicorn/lifespan/on.py (uvicorn>=0.20)",
    },
)

FATAL = (
    {
        "needle": "Engine core initialization failed",
        "regex": r"Engine core initialization failed",
        "versions": ">=0.8",
        "source": "vllm/v1/engine/core_client.py@v0.16.0",
    },
    {
        "needle": "CUDA out of memory",
        "regex": r"(torch\.OutOfMemoryError|torch\.cuda\.OutOfMemoryError).*CUDA out of memory",
        "versions": ">=0.4",
        "source": "torch/cuda/memory.py (torch>=2.1)",
    },
)

# ---- start-up markers that triage reads (triage/markers.py builds its tables from these) ----
# BANNERS: printed once per launch, so a second one from the same process name means a second
# launch wrote into the same log. READY: the server is up. STAGES: progress lines that place a
# bare error (the same OOM is `cuda_graph` during capture, `oom_kv_cache` while profiling).
BANNERS = (
    ("vllm_api_version", r"vLLM API server version", "vllm/entrypoints/openai/api_server.py@v0.16.0"),
    ("vllm_engine_init", r"Initializing an? (?:V1 )?LLM engine",
     "vllm/v1/engine/core.py@v0.16.0 (V1); vllm/engine/llm_engine.py@v0.6.3"),
    ("vllm_api_start", r"Starting vLLM API server", "vllm/entrypoints/openai/api_server.py@v0.16.0"),
)
# vLLM logs this once the engine is up, right before uvicorn serves.
# An offline LLM(...) run has no server: its engine core says the start-up is done
# (vllm/v1/engine/core.py@v0.12.0, "init engine (profile, create kv cache, warmup model) took").
READY = (r"Starting vLLM API server", r"init engine \(profile, create kv cache, warmup model\) took")
STAGES = (
    ("after_cuda_graph_capture", r"Graph capturing finished", "vllm/v1/worker/gpu_model_runner.py@v0.10.0"),
    ("cuda_graph_capture", r"Capturing (?:the model for )?(?:CUDA graphs?|cudagraphs?)",
     "vllm/worker/model_runner.py@v0.6.3; vllm/v1/worker/gpu_model_runner.py@v0.10.0"),
    # The end of the weights starts profiling: torch.compile and the dummy run come next, so
    # an OOM after "Model loading took" is no longer the weights'. Before 0.7 load_model ended
    # with "Loading model weights took %.4f GB" (V0 worker/model_runner.py@v0.5.5, @v0.6.6, V1
    # v1/worker/gpu_model_runner.py@v0.6.6): the same end in older words, tested before the
    # weights' "Loading model weights" below. V0 then logs "# GPU blocks: %d, # CPU blocks: %d"
    # (executor/gpu_executor.py@v0.5.5, @v0.6.6) and allocates that KV cache
    # (worker.py initialize_cache); V1 "GPU KV cache size: %s tokens" (v1/core/kv_cache_utils.py
    # @v0.8.5, @v0.19.0) before it allocates it.
    ("kv_cache_profiling", r"Model loading took|Memory profiling takes|Available KV cache memory"
     r"|determine_available_memory|Loading model weights took|# GPU blocks: \d+"
     r"|GPU KV cache size: ",
     "vllm/v1/worker/gpu_worker.py@v0.10.0; vllm/v1/worker/gpu_model_runner.py@v0.12.0"
     " (Model loading took); vllm/worker/model_runner.py@v0.5.5, @v0.6.6 (Loading model"
     " weights took); vllm/executor/gpu_executor.py@v0.5.5, @v0.6.6 (# GPU blocks);"
     " vllm/v1/core/kv_cache_utils.py@v0.8.5"),
    ("weights_loading", r"Loading (?:weights|model weights|safetensors checkpoint shards)|Starting to load model",
     "vllm model_loader@v0.10.0"),
)
# Words that say a log is vLLM's. Checked last: SGLang and llama-cpp-python logs mention vllm.
LOG_HINT = rb"vllm|vLLM|EngineCore|Worker_TP|VllmWorker"
LOG_HINT_ORDER = 3
