"""Logs as people paste them: cut tracebacks, CI and torch prefixes, wrapped exceptions.

Each test builds a short log in the engine's own message format and checks one mechanism
of the assembler or the root-cause rule (the rule itself: diagnosis.py).
"""

from __future__ import annotations

from servepilot.triage import triage_text
from servepilot.triage.events import exception_parts
from servepilot.triage.lines import parse_line

V1_PREFIX = "(EngineCore_DP0 pid=812) ERROR 03-10 08:07:20 [core.py:302] "


# --- line prefixes ---------------------------------------------------------------------------


def test_bracketed_ci_timestamp_before_a_vllm_line_is_a_prefix():
    ll = parse_line("[2025-03-10T15:07:20Z] ERROR 03-10 08:07:20 [core.py:302] ValueError: boom")
    assert (ll.level, ll.source, ll.message) == ("ERROR", "core.py:302", "ValueError: boom")
    assert ll.timestamp == "2025-03-10T15:07:20Z"


def test_kv_cache_failure_behind_ci_timestamps_is_found():
    log = "\n".join(
        f"[2025-03-10T15:07:2{i}Z] ERROR 03-10 08:07:20 [core.py:302] {text}"
        for i, text in enumerate(
            [
                "EngineCore hit an exception: Traceback (most recent call last):",
                '  File "/venv/vllm/v1/engine/core.py", line 59, in __init__',
                "ValueError: No available memory for the cache blocks. Try increasing "
                "`gpu_memory_utilization` when initializing the engine.",
            ]
        )
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "oom_kv_cache"
    assert rc.exception == "ValueError"


def test_torch_rank_prefix_names_the_process():
    ll = parse_line("[rank3]: AssertionError: 50 is not divisible by 8")
    assert ll.process == "rank3"
    assert ll.message == "AssertionError: 50 is not divisible by 8"


def test_traceback_under_torch_rank_prefixes_is_reassembled():
    log = "\n".join(
        [
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "serve.py", line 12, in <module>',
            "[rank0]:     engine = LLM(model=path, tensor_parallel_size=4)",
            "[rank0]: AssertionError: 50 is not divisible by 4",
        ]
    )
    rc = triage_text(log).root_cause
    assert rc is not None
    assert (rc.category, rc.process, rc.exception) == ("tp_divisibility", "rank0", "AssertionError")


# --- exception lines -------------------------------------------------------------------------


def test_plain_exception_is_an_exception_line_but_a_warning_word_is_not():
    assert exception_parts("Exception: Capture cuda graph failed: boom") == (
        "Exception",
        "Capture cuda graph failed: boom",
    )
    assert exception_parts("Warning: the flag is deprecated") is None
    assert exception_parts("Exceptional throughput today") is None


def test_sglang_plain_exception_from_graph_capture_is_cuda_graph():
    log = "\n".join(
        [
            "[2025-03-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 240, in __init__',
            "    raise Exception(",
            "Exception: Capture cuda graph failed: connection reset by the peer rank",
        ]
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "cuda_graph"
    assert rc.exception == "Exception"


# --- tracebacks without their header ---------------------------------------------------------


def test_frames_pasted_without_the_header_are_the_exception_context():
    # an OOM while SGLang allocates its KV pool: the frames say which budget ran out
    log = "\n".join(
        [
            'svc-1  |   File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 901, in init_memory_pool',
            "svc-1  |     self.token_to_kv_pool = MHATokenToKVPool(",
            'svc-1  |   File "/sgl/python/sglang/srt/mem_cache/memory_pool.py", line 312, in _create_buffers',
            "svc-1  | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total "
            "capacity of 23.50 GiB of which 9.00 MiB is free.",
        ]
    )
    d = triage_text(log)
    assert d.root_cause is not None and d.root_cause.category == "oom_kv_cache"
    assert "init_memory_pool" in d.root_cause.excerpt
    assert d.other_errors == ()


def test_error_level_frames_without_header_do_not_outrank_their_exception():
    log = "\n".join(
        V1_PREFIX + text
        for text in [
            '  File "cupy_backends/cuda/libs/nccl.pyx", line 129, in cupy_backends.cuda.libs.nccl.check_status',
            "cupy_backends.cuda.libs.nccl.NcclError: NCCL_ERROR_SYSTEM_ERROR: unhandled system error "
            "(run with NCCL_DEBUG=INFO for details)",
        ]
    )
    rc = triage_text(log).root_cause
    assert rc is not None
    assert rc.category == "nccl_distributed"
    assert rc.exception == "cupy_backends.cuda.libs.nccl.NcclError"


def test_known_message_printed_inside_a_traceback_explains_an_unknown_exception():
    # transformers asks on stdin before raising; in a container the question ends in EOFError
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/venv/transformers/dynamic_module_utils.py", line 598, in resolve_trust_remote_code',
            "The repository for acme/odd-model contains custom code which must be executed to correctly "
            "load the model. You can inspect the repository content at https://hf.co/acme/odd-model.",
            "    answer = input(",
            "EOFError: EOF when reading a line",
        ]
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "remote_code"


def test_indented_code_inside_a_traceback_is_not_read_as_a_message():
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/venv/vllm/worker.py", line 10, in check',
            '    msg = "No available memory for the cache blocks"',
            "KeyError: 'layers.0.mlp'",
        ]
    )
    rc = triage_text(log).root_cause
    assert rc is not None
    assert rc.signature != "vllm-no-memory-for-cache-blocks"
    assert rc.exception == "KeyError"


# --- chained exceptions ----------------------------------------------------------------------


def _chain(joiner: str) -> str:
    return "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/venv/transformers/models/auto/tokenization_auto.py", line 900, in from_pretrained',
            "ValueError: Tokenizer class OddTokenizer does not exist or is not currently imported.",
            "",
            joiner,
            "",
            "Traceback (most recent call last):",
            '  File "/venv/vllm/transformers_utils/tokenizer.py", line 120, in get_tokenizer',
            "RuntimeError: Failed to load the tokenizer. If the tokenizer is a custom tokenizer not yet "
            "available in the HuggingFace transformers library, consider setting `trust_remote_code=True` "
            "in LLM or using the `--trust-remote-code` flag in the CLI.",
        ]
    )


def test_engine_wrapper_raised_from_a_vaguer_error_takes_its_place():
    rc = triage_text(_chain("The above exception was the direct cause of the following exception:")).root_cause
    assert rc is not None
    assert rc.category == "remote_code"
    assert rc.exception == "RuntimeError"


def test_an_error_while_handling_another_is_not_a_wrapper():
    rc = triage_text(_chain("During handling of the above exception, another exception occurred:")).root_cause
    assert rc is not None
    assert rc.category == "tokenizer_template"
    assert rc.exception == "ValueError"


# --- settings the launch printed -------------------------------------------------------------


def _fp8_triton_failure(notice: str | None) -> str:
    lines = ["INFO 09-27 17:43:50 config.py:400] Using max model len 4096"]
    if notice:
        lines.append(notice)
    lines.append("AssertionError: fp8e4nv data type is not supported on CUDA arch < 89")
    return "\n".join(lines)


def test_fp8_kv_cache_notice_of_the_launch_makes_a_triton_fp8_failure_a_kv_dtype_failure():
    notice = "INFO 09-27 17:43:56 selector.py:227] Cannot use FlashAttention-2 backend for FP8 KV cache."
    rc = triage_text(_fp8_triton_failure(notice)).root_cause
    assert rc is not None and rc.category == "kv_cache_dtype"


def test_triton_fp8_failure_without_kv_settings_stays_a_quantization_failure():
    rc = triage_text(_fp8_triton_failure(None)).root_cause
    assert rc is not None and rc.category == "quantization_support"


def test_kv_setting_of_an_earlier_launch_does_not_carry_over():
    first = "INFO 09-27 17:40:00 api_server.py:149] vLLM API server version 0.6.3\n" + (
        "INFO 09-27 17:40:01 config.py:500] Using fp8 data type to store kv cache.\n"
    )
    second = "INFO 09-27 17:43:00 api_server.py:149] vLLM API server version 0.6.3\n" + _fp8_triton_failure(None)
    d = triage_text(first + second)
    assert d.launches == 2
    assert d.root_cause is not None and d.root_cause.category == "quantization_support"


def test_fp8_kv_setting_does_not_make_a_weights_oom_a_kv_cache_oom():
    # the launch hint is read by refine rules; it must not look like KV cache frames
    log = (
        "INFO 09-27 17:40:01 config.py:500] Using fp8 data type to store kv cache.\n"
        "INFO 09-27 17:40:05 model_runner.py:1000] Starting to load model org/big-model...\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/vllm/vllm/model_executor/model_loader/loader.py", line 401, in load_model\n'
        "    model = _initialize_model(vllm_config=vllm_config)\n"
        '  File "/opt/vllm/vllm/model_executor/models/llama.py", line 530, in __init__\n'
        "    self.model = LlamaModel(vllm_config=vllm_config)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 0 has a "
        "total capacity of 23.54 GiB of which 120.31 MiB is free.\n"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "oom_weights"


def test_gguf_missing_metadata_key_is_a_file_problem_even_when_the_key_names_the_context():
    # the key's name ("...context_length") must not make it a context-length failure
    log = (
        "llama_model_load: error loading model: error loading model hyperparameters: "
        "key not found in model: mistral.context_length\n"
        "llama_load_model_from_file: failed to load model\n"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "other"
    assert rc.signature == "llamacpp-gguf-metadata-mismatch"
    assert "mistral.context_length" in rc.explanation


def test_gguf_metadata_array_of_the_wrong_length_is_the_same_file_problem():
    log = (
        "llama_model_load: error loading model: error loading model hyperparameters: key "
        "qwen2vl.rope.dimension_sections has wrong array length; expected 4, got 3\n"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.signature == "llamacpp-gguf-metadata-mismatch"


def test_old_ggml_cuda_check_out_of_memory_line_is_a_cuda_oom():
    log = (
        "llama_model_loader: - type q4_0:  225 tensors\nCUDA error 2 at /src/llama.cpp/ggml-cuda.cu:6301: out of "
        "memory\n"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.signature == "cuda-oom"


def test_old_ggml_assert_line_is_a_failure():
    # ggml's assertion before 2024 printed "GGML_ASSERT: file:line: cond" with no "failed" word
    log = "llm_load_tensors: offloaded 33/33 layers to GPU\nGGML_ASSERT: /build/llama.cpp/ggml.c:4411: false\n"
    d = triage_text(log)
    assert d.root_cause is not None and d.root_cause.line == 2


def test_shell_report_of_an_aborted_job_is_a_failure():
    d = triage_text("main: seed = 1700000000\nzsh: abort      ./main -m model.gguf\n")
    assert d.root_cause is not None and d.root_cause.line == 2


def test_full_dev_shm_reported_by_nccl_is_shm_not_a_full_disk():
    log = (
        "host:812:830 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
        "host:812:830 [0] NCCL INFO include/shm.h:41 -> 2\n"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "shm"


def test_fa2_fallback_notice_for_an_fp8_kv_cache_is_filed_under_the_kv_dtype():
    from servepilot.triage.signatures import Matcher, load_signatures

    m = Matcher(load_signatures(), None).match("Cannot use FlashAttention-2 backend for FP8 KV cache.")
    assert m is not None and m.signature.benign and m.category == "kv_cache_dtype"
    m = Matcher(load_signatures(), None).match("Cannot use FlashAttention-2 backend for head size 80.")
    assert m is not None and m.category == "attention_backend"


def test_busy_or_unavailable_gpu_is_a_device_problem_not_a_kernel_crash():
    log = (
        "ggml_cuda_init: found 1 CUDA devices:\n"
        "CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
        "  current device: 0, in function ggml_backend_cuda_get_device_memory at ggml-cuda.cu:3040\n"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.signature == "no-cuda-gpu" and rc.category == "cuda_driver_arch"


# --- messages in other wrappings -------------------------------------------------------------


def test_context_length_error_inside_a_json_body_with_escaped_quote():
    body = (
        '{"object":"error","message":"The input (9000 tokens) is longer than the model\\\'s context '
        'length (8192 tokens).","type":"BadRequestError","code":400}'
    )
    rc = triage_text(body).root_cause
    assert rc is not None and rc.category == "max_model_len"


def test_old_llama_server_bind_failure_is_port_in_use():
    log = "llama_new_context_with_model: n_ctx = 2048\n\ncouldn't bind to server socket: hostname=0.0.0.0 port=8081\n"
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "port_in_use"
    assert "8081" in rc.explanation


# --- a readiness line that did not last ------------------------------------------------------


def _sglang_start(warmup_fails: bool) -> str:
    lines = [
        "[2025-01-10 09:00:00] INFO:     Application startup complete.",
        "[2025-01-10 09:00:00] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
    ]
    if warmup_fails:
        lines += [
            "[2025-01-10 09:02:00] Initialization failed. warmup error: Traceback (most recent call last):",
            '  File "/sgl/python/sglang/srt/entrypoints/http_server.py", line 700, in _wait_and_warmup',
            "AssertionError: res=<Response [503]>, res.text=''",
        ]
    else:
        lines.append("[2025-01-10 09:02:00] ERROR: client went away: AssertionError: stream closed")
    return "\n".join(lines)


def test_sglang_warmup_failure_after_readiness_makes_the_launch_failed():
    d = triage_text(_sglang_start(warmup_fails=True))
    assert not d.healthy
    assert d.root_cause is not None and d.root_cause.category == "other"
    assert "warmup" in d.root_cause.excerpt


def test_unknown_error_after_a_lasting_readiness_is_still_not_blamed():
    d = triage_text(_sglang_start(warmup_fails=False))
    assert d.healthy
    assert d.root_cause is None


def test_engine_core_echo_of_a_moe_kernel_check_is_read_for_its_inner_message():
    # V1 repeats a worker's error inside "Worker failed with error '...'" when only the echo is pasted
    log = (
        "(EngineCore_DP0 pid=700) ERROR 05-02 10:00:00 [core.py:400] RuntimeError: Worker failed with error "
        "'size_k must divisible by BLOCK_SIZE_K', please check the stack trace above for the root cause"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "tp_divisibility"


def test_a_wrapped_message_vaguer_than_its_wrapper_does_not_replace_it():
    # gloo's "peer went away" is only a generic distributed error; the capture failure is the cause
    capture = (
        "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
        "by peer [10.1.2.3]:41234"
    )
    assert triage_text(capture).root_cause.category == "cuda_graph"
    # ... while a vague wrapper (the engine core's echo) still gives way to a generic inner message
    echo = (
        "RuntimeError: Worker failed with error 'NCCL error: unhandled system error', please check the stack trace "
        "above for the root cause"
    )
    assert triage_text(echo).root_cause.category == "nccl_distributed"


def test_frames_without_an_exception_line_do_not_swallow_the_error_after_them():
    # a faulthandler-style dump (frames, no header, no exception line), then an error line
    log = "\n".join(
        [
            '  File "/venv/vllm/distributed/parallel_state.py", line 990 in init_distributed_environment',
            '  File "/venv/vllm/worker/worker.py", line 180 in init_device',
            "ERROR 05-02 10:00:00 [core.py:400] the device went away while the worker was starting",
        ]
    )
    rc = triage_text(log).root_cause
    assert rc is not None
    assert "device went away" in rc.message
