"""llama.cpp start-up log lines (llama-server and llama-cpp-python's server), as data.

Same row shape as engines/vllm/logs.py. Lines read from llama-cpp-python 0.3.36 (its
vendored llama.cpp) serving a GGUF on the CPU.
"""

ENGINE = "llama.cpp"
# llama-server listens on 8080; `python -m llama_cpp.server` on 8000 (ServerSettings.port).
DEFAULT_PORT = 8080
DEFAULT_PORT_BY_PROGRAM = {"llama_cpp.server": 8000}

PHASES = (
    {
        "phase": "weights",
        "needle": "llama_model_load",
        "regex": r"llama_model_load",
        "versions": ">=0.0",
        "source": "llama.cpp src/llama.cpp (llama_model_load_from_file_impl)",
    },
    {
        "phase": "weights",
        "needle": "llama_model_loader: loaded meta data",
        "regex": r"llama_model_loader: loaded meta data",
        "versions": ">=0.0",
        "source": "llama.cpp src/llama-model-loader.cpp",
    },
    {
        "phase": "weights",
        "needle": "model buffer size",
        "regex": r"load_tensors:\s+\S+ model buffer size =\s+(?P<weights_bytes>[\d.]+) MiB",
        "units": {"weights_bytes": "MiB"},
        "versions": ">=0.0",
        "source": "llama.cpp src/llama-model.cpp (load_tensors)",
    },
    {
        "phase": "kv_cache",
        "needle": "llama_kv_cache",
        "regex": r"llama_kv_cache(_unified)?: size =\s+(?P<kv_cache_bytes>[\d.]+) MiB \(\s*(?P<kv_tokens>\d+) cells",
        "units": {"kv_cache_bytes": "MiB"},
        "versions": ">=0.0",
        "source": "llama.cpp src/llama-kv-cache.cpp",
    },
    {
        "phase": "kv_cache",
        "needle": "n_seq_max",
        "regex": r"llama_context: n_seq_max\s+=\s+(?P<max_concurrency>\d+)",
        "versions": ">=0.0",
        "source": "llama.cpp src/llama-context.cpp",
    },
    {
        "phase": "kv_cache",
        "needle": "n_ctx_seq",
        "regex": r"llama_context: n_ctx_seq\s+=\s+(?P<max_model_len>\d+)",
        "versions": ">=0.0",
        "source": "llama.cpp src/llama-context.cpp",
    },
    {
        "phase": "server",
        "needle": "Application startup complete",
        "regex": r"Application startup complete",
        "versions": ">=0.0",
        "source": "uvicorn/lifespan/on.py (llama-cpp-python server)",
    },
    {
        "phase": "server",
        "needle": "Uvicorn running on",
        "regex": r"Uvicorn running on",
        "versions": ">=0.0",
        "source": "uvicorn/server.py (llama-cpp-python server)",
    },
    {
        "phase": "server",
        "needle": "server is listening",
        "regex": r"server is listening on",
        "versions": ">=0.0",
        "source": "llama.cpp tools/server/server.cpp",
    },
)

FATAL = (
    {
        "needle": "failed to load model",
        "regex": r"(main|srv\s+load_model): (error: )?failed to load model|error: unable to load model",
        "versions": ">=0.0",
        "source": "llama.cpp tools/server/server.cpp",
    },
)

# ---- start-up markers that triage reads (see engines/vllm/logs.py) ----
BANNERS = (
    ("llamacpp_build", r"^(?:main: )?build(?: =|:) \d+", "common/common.cpp (common_params print)"),
)
# tools/server/server.cpp "main: server is listening on %s"; ollama, which runs llama.cpp as its
# runner, says the model is loaded and answering with "llama runner started in %0.2f seconds"
# (llm/server.go WaitUntilRunning; e.g. 'level=INFO source=server.go:1269 msg="llama runner
# started in 63.59 seconds"' from ollama 0.11.7)
READY = (r"server is listening on", r"llama runner started in [\d.]+ seconds")
# llama.cpp's own phase prefixes: "load_tensors:" while the weights load ("llm_load_tensors:"
# before 2025), "llama_context:" / "llama_new_context_with_model:" / "llama_kv_cache_init:"
# while the context (KV cache, compute buffers) is built. The KV cache classes log under their
# constructors' names, which grew with the cache kinds: "llama_kv_cache_init:" (src/llama.cpp in
# llama-cpp-python 0.3.2's vendored llama.cpp), "llama_kv_cache_unified:", "llama_kv_cache:",
# "llama_kv_cache_iswa:", "llama_memory_recurrent:" (src/llama-kv-cache*.cpp,
# llama-memory-recurrent.cpp in 0.3.36's); the compute buffers are reserved by
# llama_context::sched_reserve and graph_reserve (src/llama-context.cpp in 0.3.36's).
STAGES = (
    ("kv_cache_profiling",
     r"^llama_(?:new_context_with_model|context|init_from_model|kv_cache\w*|memory_\w+):"
     r"|^(?:sched_reserve|graph_reserve):",
     "src/llama-context.cpp@b5000; llama-cpp-python vendor/llama.cpp/src/llama.cpp@v0.3.2,"
     " src/llama-kv-cache.cpp, src/llama-context.cpp@v0.3.36"),
    # the old Metal backend named each buffer it created: 'kv' and 'alloc' (compute) come with
    # the context, after the weights' 'data' buffer (ggml-metal.m; h2oai/h2ogpt#1311's log)
    ("kv_cache_profiling", r"^ggml_metal_add_buffer: allocated '(?:kv|alloc)\s*'", "ggml-metal.m@b1500"),
    ("weights_loading", r"^(?:llm_)?load_tensors:", "src/llama-model.cpp@b5000"),
)
LOG_HINT = rb"llama_model_load|ggml_|llama_init|llama_context|main: build|\bsrv  "
LOG_HINT_ORDER = 2
