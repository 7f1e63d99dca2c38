"""Issue 13: what a memory failure means is decided by the phase the engine was in, read from
the engines' own progress lines (each release's words) and from a traceback's frames. Every
test pairs an engine's line (its source named) with a neighbour that must decide the other way.
"""

from __future__ import annotations

import pytest

from servepilot.triage import triage_text

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 74.00 MiB."


def _after(progress: str, error: str = OOM) -> str:
    return f"{progress}\n{error}\n"


# vLLM before 0.7 ends load_model with "Loading model weights took %.4f GB"
# (vllm/worker/model_runner.py@v0.5.5, @v0.6.6); profile_run comes next.
def test_an_oom_after_old_vllm_says_the_weights_took_their_share_is_the_kv_profile():
    line = "INFO 07-24 21:22:31 model_runner.py:255] Loading model weights took 14.2487 GB"
    rc = triage_text(_after(line)).root_cause
    assert (rc.category, rc.basis) == ("oom_kv_cache", "signature")


def test_an_oom_while_old_vllm_still_loads_the_shards_is_the_weights():
    line = "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:05<00:05,  2.6s/it]"
    assert triage_text(_after(line)).root_cause.category == "oom_weights"


# V0's executor logs the blocks it sized, then allocates them (vllm/executor/gpu_executor.py
# @v0.5.5, @v0.6.6 "# GPU blocks: %d, # CPU blocks: %d"); capture follows.
@pytest.mark.parametrize(
    ("progress", "category"),
    [
        (
            "INFO 02-03 03:43:48 llm_engine.py:316] # GPU blocks: 7754, # CPU blocks: 2048",
            "oom_kv_cache",
        ),
        (
            "INFO 02-03 03:43:49 model_runner.py:625] Capturing the model for CUDA graphs. "
            "This may lead "
            "to unexpected consequences if the model is not static.",
            "cuda_graph",
        ),
    ],
)
def test_old_vllm_kv_sizing_and_capture_lines_place_an_oom(progress, category):
    assert triage_text(_after(progress)).root_cause.category == category


# SGLang names every capture "Capture <what> begin/end" (eagle_worker.py@v0.5.9 "Capture draft
# extend cuda graph begin", multi_layer_eagle_draft_extend_cuda_graph_runner.py@v0.5.23
# "Capture single-CG draft extend begin").
@pytest.mark.parametrize(
    "begin",
    [
        "Capture draft extend cuda graph begin (step 1). This can take up to several minutes. "
        "avail mem=9.10 GB",
        "Capture single-CG draft extend begin. This can take several minutes.",
        "Capture npu graph begin. This can take up to several minutes. avail mem=20.01 GB",
    ],
)
def test_an_oom_inside_any_sglang_capture_is_cuda_graph(begin):
    text = _after(f"[2025-09-01 10:00:00 TP0] {begin}")
    assert triage_text(text, engine="sglang").root_cause.category == "cuda_graph"


def test_an_oom_after_an_sglang_capture_ended_is_not_cuda_graph():
    text = _after(
        "[2025-09-01 10:00:00 TP0] Capture draft cuda graph end. Time elapsed: 3.10 s. "
        "mem usage=0.40 GB. avail mem=1.10 GB."
    )
    assert triage_text(text, engine="sglang").root_cause.category == "oom_kv_cache"


def test_a_log_that_stops_inside_a_single_cg_capture_is_a_capture_stall_and_its_end_is_not():
    begin = (
        "[2025-09-01 10:00:00 TP0] Capture single-CG draft extend begin. "
        "This can take several minutes.\n"
    )
    rc = triage_text(begin, engine="sglang").root_cause
    assert (rc.category, rc.basis) == ("cuda_graph", "stall")
    ended = (
        begin
        + "[2025-09-01 10:00:05 TP0] Capture single-CG draft extend end. Time elapsed: 5.00 s.\n"
    )
    assert triage_text(ended, engine="sglang").root_cause is None


# llama.cpp's KV cache logs under its constructor's name ("llama_kv_cache_unified:",
# "llama_kv_cache:" in src/llama-kv-cache.cpp of llama-cpp-python 0.3.36's vendored llama.cpp);
# the Vulkan backend's failed allocation (ggml-vulkan.cpp "ggml_vulkan: Device memory allocation
# of size %zu failed.") is the context's, not the weights'.
VULKAN_FAIL = "ggml_vulkan: Device memory allocation of size 1059303232 failed."


@pytest.mark.parametrize(
    "context_line",
    [
        "llama_kv_cache_unified:    Vulkan0 KV buffer size =  6144.00 MiB",
        "llama_kv_cache: layer   0: dev = Vulkan0",
        "sched_reserve: reserving ...",
    ],
)
def test_a_vulkan_allocation_failing_while_the_context_is_built_is_the_kv_cache(context_line):
    text = "load_tensors: offloading 48 repeating layers to GPU\n" + _after(
        context_line, VULKAN_FAIL
    )
    assert triage_text(text).root_cause.category == "oom_kv_cache"


def test_a_vulkan_allocation_failing_while_the_tensors_load_is_the_weights():
    text = _after("load_tensors: offloading 48 repeating layers to GPU", VULKAN_FAIL)
    assert triage_text(text).root_cause.category == "oom_weights"


# PyTorch's OOM message accounts for graph pools in words ("with 22.00 MiB allocated in private
# pools (e.g., CUDA Graphs)", c10/cuda/CUDACachingAllocator.cpp@v2.5.0): no capture frame.
POOLS_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 42.00 MiB. GPU 0 has a total "
    "capacity of 23.49 GiB of which 55.38 MiB is free. Of the allocated memory 21.51 GiB is "
    "allocated by PyTorch, with 22.00 MiB allocated in private pools (e.g., CUDA Graphs), and "
    "303.36 MiB is reserved by PyTorch but unallocated."
)


def test_the_oom_messages_own_cuda_graphs_words_are_no_capture():
    text = _after("[2025-09-07 06:09:00 TP0] Load weight begin. avail mem=23.10 GB", POOLS_OOM)
    assert triage_text(text, engine="sglang").root_cause.category == "oom_weights"


def test_a_capture_frame_still_makes_that_oom_cuda_graph():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/py/sglang/srt/model_executor/cuda_graph_runner.py", line 310, in capture\n'
        "    out = run_once()\n"
        f"{POOLS_OOM}\n"
    )
    assert triage_text(text, engine="sglang").root_cause.category == "cuda_graph"


# Frames of the weights' loading outrank the phase another rank's progress line set: SGLang's
# model_runner.py load_model -> model_loader/loader.py (@v0.4.5.post3, @v0.5.9).
def _lagging_rank(frames: str) -> str:
    return (
        "[2025-05-01 10:00:00 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=10.00 GB, mem usage=60.00 GB.\n"
        "[2025-05-01 10:00:01 TP1] Scheduler hit an exception: Traceback (most recent call last):\n"
        f"{frames}"
        f"{OOM}\n"
    )


def test_an_oom_in_a_rank_still_loading_its_weights_is_the_weights():
    frames = (
        '  File "/py/sglang/srt/model_executor/model_runner.py", line 410, in load_model\n'
        "    self.model = get_model(\n"
        '  File "/py/sglang/srt/model_loader/loader.py", line 380, in load_model\n'
        "    model.load_weights(self._get_all_weights(model_config, model))\n"
    )
    assert triage_text(_lagging_rank(frames), engine="sglang").root_cause.category == "oom_weights"


def test_the_same_oom_in_the_memory_pool_after_the_weights_is_the_kv_cache():
    frames = (
        '  File "/py/sglang/srt/model_executor/model_runner.py", line 900, in init_memory_pool\n'
        "    self.token_to_kv_pool = MHATokenToKVPool(\n"
        '  File "/py/sglang/srt/mem_cache/memory_pool.py", line 230, in _create_buffers\n'
        "    torch.zeros(\n"
    )
    assert triage_text(_lagging_rank(frames), engine="sglang").root_cause.category == "oom_kv_cache"


# vLLM's sleep-mode allocator (csrc/cumem_allocator.cpp@v0.8.5, @v0.19.0 CUDA_CHECK "CUDA Error:
# %s at %s:%d") allocates the weights and the KV cache under tags and re-creates both on wake_up.
CUMEM = "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"


def test_a_bare_sleep_mode_allocator_oom_is_the_share_and_names_the_other_phases():
    d = triage_text(CUMEM + "\n")
    rc = d.root_cause
    assert (rc.category, rc.signature, rc.basis) == (
        "oom_kv_cache",
        "vllm-cumem-allocator-oom",
        "signature-bare",
    )
    assert "oom_weights" in {a.category for a in d.alternatives}


def test_a_sleep_mode_allocator_oom_while_the_weights_load_is_the_weights():
    text = _after(
        "INFO 05-01 10:00:00 [default_loader.py:1] Loading safetensors checkpoint shards:  25%",
        CUMEM,
    )
    rc = triage_text(text).root_cause
    assert (rc.category, rc.signature) == ("oom_weights", "vllm-cumem-allocator-oom")


def test_a_sleep_mode_allocator_oom_on_wake_up_is_the_share_whatever_the_phase_line_says():
    text = (
        "INFO 05-01 10:00:00 [default_loader.py:1] Loading safetensors checkpoint shards:  25%\n"
        "Traceback (most recent call last):\n"
        '  File "/py/vllm/device_allocator/cumem.py", line 241, in wake_up\n'
        "    create_and_map(handle)\n"
        f"RuntimeError: {CUMEM}\n"
    )
    assert triage_text(text).root_cause.category == "oom_kv_cache"


# SGLang's input limit is min(context_len - 1, max_total_num_tokens - 1) - 5
# (sglang/srt/managers/tp_worker.py@v0.3.6, @v0.5.23; the message: managers/utils.py@v0.5.23).
def _refusal(asked: int, limit: int) -> str:
    return (
        f"[2025-03-03 06:49:28 TP0] Input length ({asked} tokens) exceeds the maximum allowed "
        f"length ({limit} tokens). Use a shorter input or enable --allow-auto-truncate.\n"
    )


def _pool_line(pool: int, context: int) -> str:
    return (
        f"[2025-03-03 06:40:00 TP0] max_total_num_tokens={pool}, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests=2048, context_len={context}\n"
    )


def test_a_limit_set_by_a_pool_smaller_than_the_context_is_the_kv_cache():
    d = triage_text(_pool_line(59868, 163840) + _refusal(160062, 59862), engine="sglang")
    assert d.root_cause.category == "oom_kv_cache"
    assert "max_model_len" not in {a.category for a in d.alternatives}  # the log decided it


def test_a_limit_set_by_the_context_with_a_larger_pool_is_the_context():
    d = triage_text(_pool_line(500000, 32768) + _refusal(40000, 32762), engine="sglang")
    assert d.root_cause.category == "max_model_len"


def test_without_the_pool_line_a_measured_looking_limit_is_the_pool_with_the_context_as_rival():
    d = triage_text(_refusal(160062, 59862), engine="sglang")
    assert d.root_cause.category == "oom_kv_cache"
    assert "max_model_len" in {a.category for a in d.alternatives}


def test_without_the_pool_line_a_designed_limit_is_the_context_with_the_pool_as_rival():
    d = triage_text(_refusal(40000, 32762), engine="sglang")  # 32768, a config's length
    assert d.root_cause.category == "max_model_len"
    assert "oom_kv_cache" in {a.category for a in d.alternatives}


# A notebook's traceback (IPython/core/ultratb.py) quotes source with line numbers and heads
# itself with the bare exception class; neither is a line of the run.
NOTEBOOK_TRACEBACK = (
    "OutOfMemoryError                          Traceback (most recent call last)\n"
    "File ~/env/lib/python3.10/site-packages/vllm/worker/model_runner.py:243, in "
    "GPUModelRunnerBase.load_model(self)\n"
    "    242     with CudaMemoryProfiler() as m:\n"
    "--> 243         self.model = get_model(model_config=self.model_config)\n"
    '    255     logger.info("Loading model weights took %.4f GB",\n'
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n"
)


def test_a_notebook_tracebacks_quoted_source_sets_no_phase_and_its_header_is_no_error():
    rc = triage_text(NOTEBOOK_TRACEBACK).root_cause
    assert rc.category == "oom_weights"
    assert rc.line == 6


def test_the_same_words_logged_by_the_run_before_the_traceback_do_set_the_phase():
    logged = "INFO 07-24 21:22:31 model_runner.py:255] Loading model weights took 14.2487 GB\n"
    rc = triage_text(logged + NOTEBOOK_TRACEBACK).root_cause
    assert (rc.category, rc.line) == ("oom_kv_cache", 7)


# ggml's CUDA backend names the function that failed (ggml_cuda_error in ggml-cuda.cu, vendored
# llama.cpp of llama-cpp-python 0.3.2 and 0.3.36) and itself by its build (GGML_CUDA_NAME "ROCm").
def _ggml_cuda_error(function: str) -> str:
    return (
        "ROCm error: out of memory\n"
        f"  current device: 0, in function {function} at "
        "/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:502\n"
        "  ggml_cuda_device_malloc(&ptr, look_ahead_size, device)\n"
    )


def test_ggmls_memory_pool_running_out_is_the_batch_memory_not_the_weights():
    rc = triage_text(_ggml_cuda_error("alloc")).root_cause
    assert (rc.category, rc.signature, rc.line) == ("oom_kv_cache", "cuda-oom", 1)


def test_ggmls_row_split_weight_allocation_running_out_is_the_weights():
    rc = triage_text(_ggml_cuda_error("ggml_backend_cuda_split_buffer_init_tensor")).root_cause
    assert (rc.category, rc.signature) == ("oom_weights", "cuda-oom")


# PyTorch's allocator on ROCm says HIP (as printed by vLLM on MI300X in corpus/full-logs).
@pytest.mark.parametrize(
    ("progress", "category"),
    [
        (
            "INFO 05-01 10:00:00 [default_loader.py:1] Loading safetensors checkpoint shards:  25%",
            "oom_weights",
        ),
        (
            "INFO 05-01 10:00:00 [gpu_model_runner.py:1] Capturing CUDA graphs (decode, FULL)",
            "cuda_graph",
        ),
    ],
)
def test_a_hip_oom_is_placed_by_its_phase_as_a_cuda_one(progress, category):
    rc = triage_text(_after(progress, "HIP out of memory. Tried to allocate 80.00 MiB.")).root_cause
    assert (rc.category, rc.signature) == (category, "cuda-oom")


# vLLM V1's engine core echoes a worker's OOM from where it waited: after allocating the KV cache
# it runs the workers' warm-up (v1/executor/abstract.py@v0.10.2 initialize_from_config:
# collective_rpc("compile_or_warm_up_model")), which captures CUDA graphs unless enforce_eager.
def _engine_core_echo(enforce_eager: bool) -> str:
    prefix = "(EngineCore_DP0 pid=7291) ERROR 10-23 08:05:13 [core.py:708] "
    return (
        "(EngineCore_DP0 pid=7291) INFO 10-23 07:59:20 [core.py:1] Initializing a V1 LLM engine "
        f"(v0.11.0) with config: model='m', enforce_eager={enforce_eager}, kv_cache_dtype=auto\n"
        + "".join(
            prefix + line + "\n"
            for line in (
                "Traceback (most recent call last):",
                '  File "/py/vllm/v1/engine/core.py", line 150, in _initialize_kv_caches',
                "    self.model_executor.initialize_from_config(kv_cache_configs)",
                '  File "/py/vllm/v1/executor/abstract.py", line 74, in initialize_from_config',
                '    self.collective_rpc("compile_or_warm_up_model")',
                "RuntimeError: Worker failed with error 'CUDA error: out of memory",
            )
        )
    )


def test_the_engine_cores_echo_from_the_warm_up_is_the_capture_when_graphs_are_on():
    assert triage_text(_engine_core_echo(False)).root_cause.category == "cuda_graph"


def test_the_same_echo_of_an_eager_launch_is_the_memory_beside_the_kv_cache():
    assert triage_text(_engine_core_echo(True)).root_cause.category == "oom_kv_cache"


# Serving replays CUDA graphs through the capture's own module (sglang/srt/model_executor/
# cuda_graph_runner.py replay, called from scheduler.py run_batch -> tp_worker.py
# forward_batch_generation, @v0.4.5.post3..@v0.5.23): only the capturing calls mean capture.
def _sglang_stack(*frames: str) -> str:
    lines = "".join(
        f'  File "/py/sglang/srt/{path}", line 10, in {func}\n    x()\n' for path, func in frames
    )
    head = "[2025-05-01 10:00:00 TP0] Scheduler hit an exception: "
    head += "Traceback (most recent call last):"
    return f"{head}\n{lines}{OOM}\n"


def test_an_oom_while_a_server_replays_its_graphs_is_the_batch_not_the_capture():
    text = _sglang_stack(
        ("managers/scheduler.py", "event_loop_overlap"),
        ("managers/scheduler.py", "run_batch"),
        ("managers/tp_worker.py", "forward_batch_generation"),
        ("model_executor/cuda_graph_runner.py", "replay"),
    )
    assert triage_text(text, engine="sglang").root_cause.category == "oom_kv_cache"


def test_an_oom_in_the_same_module_while_it_captures_is_cuda_graph():
    text = _sglang_stack(
        ("model_executor/model_runner.py", "init_cuda_graphs"),
        ("model_executor/cuda_graph_runner.py", "capture"),
        ("model_executor/cuda_graph_runner.py", "capture_one_batch_size"),
    )
    assert triage_text(text, engine="sglang").root_cause.category == "cuda_graph"


def test_a_bare_oom_under_vllms_serving_step_is_the_batch_and_without_frames_stays_unsure():
    step = (
        "Traceback (most recent call last):\n"
        '  File "/py/vllm/v1/engine/core.py", line 701, in run_busy_loop\n'
        "    self._process_engine_step()\n"
        '  File "/py/vllm/v1/engine/core.py", line 280, in step\n'
        "    model_output = self.execute_model(s)\n"
        '  File "/py/vllm/v1/engine/core.py", line 266, in execute_model\n    raise err\n'
        f"{OOM}\n"
    )
    assert triage_text(step).root_cause.category == "oom_kv_cache"
    assert triage_text(OOM + "\n").root_cause.basis == "signature-bare"


# llama.cpp throws "unable to allocate %s buffer" only where it places the weights (src/llama.cpp
# llm_load_tensors in llama-cpp-python 0.3.2's vendored llama.cpp, src/llama-model.cpp
# load_tensors in 0.3.36's): the message names its phase; the host buffer's own failure
# (ggml-backend.cpp ggml_backend_cpu_buffer_type_alloc_buffer) before it is the first line.
def test_the_weights_own_refusal_is_sure_without_a_phase_line():
    rc = triage_text(
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n"
    ).root_cause
    assert (rc.category, rc.basis) == ("oom_weights", "signature")


def test_the_host_buffers_failure_is_the_line_and_its_phase_decides():
    host = (
        "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 437944320\n"
    )
    loading = (
        "load_tensors: loading model tensors, this can take a while... (mmap = false)\n"
        + host
        + "llama_model_load: error loading model: unable to allocate CPU buffer\n"
    )
    rc = triage_text(loading).root_cause
    assert (rc.category, rc.line) == ("oom_weights", 2)
    rc = triage_text("llama_kv_cache: CPU KV buffer size = 8192.00 MiB\n" + host).root_cause
    assert (rc.category, rc.line) == ("oom_kv_cache", 2)


# PyTorch's OOM message counts private pools only when they hold memory (the CUDA graphs' pools,
# c10/cuda/CUDACachingAllocator.cpp@v2.5.0): a process holding some had begun capturing.
def test_an_oom_whose_process_holds_graph_pools_is_past_the_weights_when_no_line_says_more():
    d = triage_text(POOLS_OOM + "\n")
    assert (d.root_cause.category, d.root_cause.basis) == ("oom_kv_cache", "signature-bare")
    assert "cuda_graph" in {a.category for a in d.alternatives}


def test_a_capture_line_still_outranks_the_accounting():
    text = _after(
        "[2025-09-07 06:09:00 TP0] Capture cuda graph begin. This can take up to several minutes.",
        POOLS_OOM,
    )
    assert triage_text(text, engine="sglang").root_cause.category == "cuda_graph"


def test_an_oom_without_pools_in_its_accounting_stays_the_unsure_weights_reading():
    plain = POOLS_OOM.replace("with 22.00 MiB allocated in private pools (e.g., CUDA Graphs), ", "")
    d = triage_text(plain + "\n")
    assert (d.root_cause.category, d.root_cause.basis) == ("oom_weights", "signature-bare")


# The engines' own words for a KV pool that came out too small: SGLang's scheduler assert
# (managers/tp_worker.py@v0.3.6..@v0.5.23), its hybrid models' state pool (mem_cache/
# memory_pool.py@v0.5.9), vLLM's pooling-model warm-up (v1/worker/gpu_model_runner.py@v0.19.0).
@pytest.mark.parametrize(
    "message",
    [
        "AssertionError: Memory pool size is too small",
        "AssertionError: Not enough space for mamba cache, try to increase "
        "--mamba-full-memory-ratio or "
        "--max-mamba-cache-size. mid=1, self.mamba_pool.size=8",
        "RuntimeError: CUDA out of memory occurred when warming up pooler with 256 dummy requests.",
    ],
)
def test_the_engines_words_for_a_pool_too_small_are_the_kv_cache(message):
    assert triage_text(message + "\n").root_cause.category == "oom_kv_cache"


def test_another_assert_of_the_same_pool_module_is_not_a_memory_failure():
    rc = triage_text("AssertionError: request has req_pool_idx but is not chunked\n").root_cause
    assert rc.category not in ("oom_kv_cache", "oom_weights")


# TPU: the Pallas kernel's block table lives in SMEM and grows with max_model_len
# (vllm/attention/backends/pallas.py@v0.6.6); HBM programs load after the KV cache took its share
# (vllm/v1/worker/tpu_worker.py@v0.8.5 initialize_from_config, then compile_or_warm_up_model).
XLA = "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. "


def test_a_tpu_compile_out_of_scalar_memory_is_the_context_length():
    rc = triage_text(
        XLA + "Ran out of memory in memory space smem. Used 1.00M of 1.00M smem.\n"
    ).root_cause
    assert rc.category == "max_model_len"


def test_a_tpu_compile_out_of_hbm_is_the_kv_share_and_while_loading_the_weights():
    hbm = XLA + "Ran out of memory in memory space hbm. Used 16.5G of 15.75G hbm."
    assert triage_text(hbm + "\n").root_cause.category == "oom_kv_cache"
    loading = "INFO 05-01 10:00:00 [tpu.py:1] Loading safetensors checkpoint shards:  25%"
    assert triage_text(_after(loading, hbm)).root_cause.category == "oom_weights"


# The report that closes a failed context in the same run of error lines (llama-context.cpp
# "failed to initialize the context: %s" in llama-cpp-python 0.3.36's vendored llama.cpp;
# common.cpp "failed to create context with model '%s'") places the device's failed allocation.
VULKAN_RUN = (
    "ggml_vulkan: Device memory allocation of size 4294967296 failed.\n"
    "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory\n"
)


@pytest.mark.parametrize(
    "report",
    [
        "llama_init_from_model: failed to initialize the context: "
        "failed to allocate compute pp buffers",
        "common_init_from_params: failed to create context with model 'm.gguf'",
    ],
)
def test_a_device_allocation_closed_by_a_failed_context_is_the_kv_cache(report):
    rc = triage_text(VULKAN_RUN + report + "\n").root_cause
    assert (rc.category, rc.line) == ("oom_kv_cache", 1)


def test_the_same_allocation_closed_by_the_weights_refusal_is_the_weights():
    rc = triage_text(
        VULKAN_RUN + "llama_model_load: error loading model: unable to allocate Vulkan0 buffer\n"
    ).root_cause
    assert rc.category == "oom_weights"


# --- the fixes follow the part of the launch the memory was for ----------------------------------
# llama.cpp's context fixes: common/arg.cpp (-c/--ctx-size, -b, -ub, -ctk/-ctv) and
# src/llama-context.cpp ("quantized V cache was requested, but this requires Flash Attention")
# in llama-cpp-python 0.3.36's vendored llama.cpp
def test_a_llamacpp_context_allocation_is_fixed_by_the_context_not_the_weights():
    log = (
        "llama_context: constructing llama_context\n"
        "ggml_vulkan: Device memory allocation of size 1059303232 failed.\n"
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer\n"
    )
    d = triage_text(log)
    assert d.root_cause.category == "oom_kv_cache"
    assert "--ctx-size" in d.remedies[0].change and "-ctk" in d.remedies[1].change


def test_the_same_failure_while_the_weights_load_keeps_the_weights_fix():
    log = (
        "load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
        "ggml_vulkan: Device memory allocation of size 1059303232 failed.\n"
    )
    d = triage_text(log)
    assert d.root_cause.category == "oom_weights"
    assert "--n-gpu-layers" in d.remedies[0].change and "--ctx-size" not in d.remedies[0].change
