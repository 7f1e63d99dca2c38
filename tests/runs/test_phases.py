from hypothesis import given, settings
from hypothesis import strategies as st

from servepilot.runs.phases import PhaseTracker, default_port

# Written in the engines' formats (vllm/logger.py format, tqdm bar_format with \r redraws).
VLLM_LOG = (
    "INFO 02-10 12:00:00 [utils.py:253] non-default args: {'model': '/m', 'tensor_parallel_size': 2}\n"
    "(EngineCore_DP0 pid=11) INFO 02-10 12:00:01 [core.py:93] Initializing a V1 LLM engine (v0.16.0) with config: "
    "model='/m'\n"
    "(Worker_TP0 pid=12) INFO 02-10 12:00:05 [gpu_model_runner.py:2602] Starting to load model /m...\n"
    "(Worker_TP0 pid=12) \x1b[36mLoading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\r"
    "Loading safetensors checkpoint shards:  25% Completed | 1/4 [00:10<00:30, 10.0s/it]\r"
    "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:20<00:20, 10.0s/it]\r"
    "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:40<00:00, 10.0s/it]\n"
    "(Worker_TP0 pid=12) INFO 02-10 12:00:46 [gpu_model_runner.py:2653] Model loading took 70.25 GiB memory and "
    "41.000000 seconds\n"
    "(Worker_TP0 pid=12) INFO 02-10 12:00:50 [backends.py:548] Dynamo bytecode transform time: 5.10 s\n"
    "(Worker_TP0 pid=12) INFO 02-10 12:01:10 [gpu_worker.py:298] Available KV cache memory: 45.50 GiB\n"
    "(EngineCore_DP0 pid=11) INFO 02-10 12:01:11 [kv_cache_utils.py:1087] GPU KV cache size: 1,234,560 tokens\n"
    "(EngineCore_DP0 pid=11) INFO 02-10 12:01:11 [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens per "
    "request: 37.68x\n"
    "(Worker_TP0 pid=12) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  50%|#####     | 34/67\r"
    "(Worker_TP0 pid=12) INFO 02-10 12:01:30 [gpu_model_runner.py:3480] Graph capturing finished in 19 secs, took 1.20 "
    "GiB\n"
    "(APIServer pid=10) INFO 02-10 12:01:32 [api_server.py:1839] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    "(APIServer pid=10) INFO:     Application startup complete.\n"
)

SGLANG_LOG = (
    "[2026-01-01 10:00:00 TP0] Init torch distributed begin.\n"
    "[2026-01-01 10:00:02 TP0] Load weight begin. avail mem=78.50 GB\n"
    "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.00s/it]\n"
    "[2026-01-01 10:00:09 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.20 GB, mem "
    "usage=15.30 GB.\n"
    "[2026-01-01 10:00:10 TP0] KV Cache is allocated. #tokens: 412345, K size: 25.10 GB, V size: 25.10 GB\n"
    "[2026-01-01 10:00:12 TP0] Capture cuda graph bs [1, 2, 4, 8]\n"
    "[2026-01-01 10:00:20 TP0] max_total_num_tokens=412345, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=2048, context_len=131072, available_gpu_mem=10.20 GB\n"
    "[2026-01-01 10:00:22] INFO:     Application startup complete.\n"
    "[2026-01-01 10:00:25] The server is fired up and ready to roll!\n"
)

LLAMACPP_LOG = (
    "llama_model_loader: loaded meta data with 18 key-value pairs and 21 tensors from tiny.gguf (version GGUF V3 "
    "(latest))\n"
    "load_tensors:   CPU_Mapped model buffer size =     0.44 MiB\n"
    "llama_context: n_seq_max             = 1\n"
    "llama_context: n_ctx_seq             = 2048\n"
    "llama_kv_cache: size =    1.00 MiB (  2048 cells,   2 layers,  1/1 seqs), K (f16):    0.50 MiB, V (f16):    0.50 "
    "MiB\n"
    "INFO:     Application startup complete.\n"
    "INFO:     Uvicorn running on http://127.0.0.1:8000 (Press CTRL+C to quit)\n"
)

GiB = 1024**3


def run(engine, text):
    t = PhaseTracker(engine)
    events = t.feed(text)
    return t, events


def test_vllm_phases_figures_and_shards():
    t, events = run("vllm", VLLM_LOG)
    phases = [e.phase for e in events if e.kind == "phase"]
    assert phases == ["init", "weights", "profiling", "kv_cache", "cuda_graphs", "server"]
    shards = [(e.values["shard"], e.values["shards"], e.values["percent"]) for e in events if e.kind == "progress"]
    assert shards == [(0, 4, 0), (1, 4, 25), (2, 4, 50), (4, 4, 100)]
    assert t.figures["kv_tokens"] == 1_234_560
    assert t.figures["max_model_len"] == 32_768
    assert t.figures["max_concurrency"] == 37.68
    assert t.figures["available_kv_bytes"] == int(45.5 * GiB)
    assert t.figures["weights_bytes"] == int(70.25 * GiB)
    assert t.figures["engine_version"] == "0.16.0"
    assert t.server_hint and t.fatal_line is None


def test_vllm_merged_kv_line_of_later_versions():
    t, _ = run("vllm", "INFO [kv_cache_utils.py:1] GPU KV cache size: 98,304 tokens, Maximum concurrency for 8,192 "
                       "tokens per request: 12.00x\n")
    assert (t.figures["kv_tokens"], t.figures["max_model_len"], t.figures["max_concurrency"]) == (98_304, 8_192, 12.0)


def test_sglang_phases_and_figures():
    t, events = run("sglang", SGLANG_LOG)
    assert [e.phase for e in events if e.kind == "phase"] == ["init", "weights", "kv_cache", "cuda_graphs", "server"]
    assert t.figures["kv_tokens"] == 412_345
    assert t.figures["max_concurrency"] == 2048
    assert t.figures["max_model_len"] == 131_072
    assert t.figures["weights_bytes"] == int(round(15.30 * GiB))


def test_llamacpp_phases_and_figures():
    t, events = run("llama.cpp", LLAMACPP_LOG)
    assert [e.phase for e in events if e.kind == "phase"] == ["weights", "kv_cache", "server"]
    assert t.figures["kv_tokens"] == 2048
    assert t.figures["max_concurrency"] == 1
    assert t.figures["max_model_len"] == 2048
    assert t.figures["kv_cache_bytes"] == 1024**2


def test_fatal_line_is_kept_once():
    t, events = run("vllm",
                    "ERROR [core.py:1] RuntimeError: Engine core initialization failed. See root cause above.\n" * 2)
    assert t.fatal_line.endswith("See root cause above.")
    assert [e.kind for e in events] == ["fatal", "fatal"]


def test_unknown_engine_uses_every_engines_rules():
    t, _ = run(None, SGLANG_LOG + LLAMACPP_LOG)
    assert t.phase == "server" and t.figures["kv_tokens"] in (412_345, 2048)


def test_an_unterminated_line_waits_for_its_end():
    t = PhaseTracker("vllm")
    assert t.feed("(EngineCore pid=1) INFO GPU KV cache size: 1,0") == []
    t.feed("00 tokens\n")
    assert t.figures["kv_tokens"] == 1000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(VLLM_LOG)), max_size=12))
def test_any_chunking_gives_the_same_result(cuts):
    whole, _ = run("vllm", VLLM_LOG)
    t = PhaseTracker("vllm")
    bounds = [0, *sorted(cuts), len(VLLM_LOG)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        t.feed(VLLM_LOG[a:b])
    assert (t.phase, t.figures, t.progress) == (whole.phase, whole.figures, whole.progress)


def test_default_ports():
    assert default_port("vllm") == 8000
    assert default_port("sglang") == 30000
    assert default_port("llama.cpp", "llama-server") == 8080
    assert default_port("llama.cpp", "python -m llama_cpp.server") == 8000
    assert default_port(None) is None


def test_a_figure_that_is_not_a_number_is_ignored_not_raised():
    # "[\d.]+" also matches "." and "1.2.3": float() raised ValueError out of the
    # supervisor loop, ending the supervision of a healthy start.
    t = PhaseTracker("vllm")
    events = t.feed("INFO Model loading took 1.2.3 GiB and 5 s\nINFO Model loading took . GiB\n")
    assert "weights_bytes" not in t.figures
    assert t.phase == "weights" and any(e.kind == "phase" for e in events)
    t.feed("INFO Model loading took 2.5 GiB\n")
    assert t.figures["weights_bytes"] == int(2.5 * 2**30)


def test_an_endless_line_keeps_a_bounded_tail():
    # Output without any newline (a progress bar gone wrong, binary garbage) must not grow
    # the kept tail without bound: every feed copied it whole (quadratic time, memory).
    from servepilot.runs.phases import MAX_TAIL_CHARS

    t = PhaseTracker("vllm")
    for _ in range(200):
        t.feed("x" * 10_000)
    assert len(t._tail) <= MAX_TAIL_CHARS
    t.feed(" Model loading took 3 GiB\n")
    assert t.figures["weights_bytes"] == 3 * 2**30


def test_a_hostile_long_line_is_matched_in_linear_time():
    # sglang's "max_total_num_tokens=<digits>.*?max_running_requests=" backtracked over
    # every split of a long digit run: 6.5 s for one 40 KB line, in the supervisor loop.
    import time

    line = ("max_total_num_tokens=" + "1" * 20_000) * 2 + "\n"
    started = time.perf_counter()
    PhaseTracker("sglang").feed(line)
    assert time.perf_counter() - started < 1.0
    t = PhaseTracker("sglang")
    t.feed("max_total_num_tokens=12345, chunked_prefill_size=8192, max_running_requests=64, context_len=32768\n")
    assert (t.figures["kv_tokens"], t.figures["max_concurrency"], t.figures["max_model_len"]) == (12345, 64, 32768)
