"""Issue 13, full logs: which of a process's reports is the origin when the file's order is not
the order things happened in. Each log is built from lines the programs print (the source of
each is said beside it); each test shows the mechanism decides one way and a neighbour the
other."""

from __future__ import annotations

from servepilot.triage import triage_text

# vLLM 0.6's API server waiting for its engine process, which died without a word: the
# frontend raises "Engine process failed to start", then, tearing down, destroys its ZeroMQ
# context under the output-loop tasks each setup() attempt started; asyncio reports those
# orphaned tasks as they are collected, before the main traceback reaches stderr
# (vllm/entrypoints/openai/api_server.py@v0.6.6 build_async_engine_client_from_engine_args,
# vllm/engine/multiprocessing/client.py@v0.6.6 setup/close; asyncio/futures.py Future.__del__).
# As committed in https://github.com/spottabathula69/gpu-llm-inference-platform/blob/
# 40d834dd5f258e68b09995c466be28279a47a8e5/vllm_crash.log (shortened).
_ORPHAN = (
    "Task exception was never retrieved\n"
    "future: <Task finished name='Task-2' coro=<MQLLMEngineClient.run_output_handler_loop() done, "
    "defined at /py/vllm/engine/multiprocessing/client.py:178> exception=ZMQError('Operation not "
    "supported')>\n"
    "Traceback (most recent call last):\n"
    '  File "/py/vllm/engine/multiprocessing/client.py", line 184, in run_output_handler_loop\n'
    "    while await self.output_socket.poll(timeout=VLLM_RPC_TIMEOUT\n"
    '  File "/py/zmq/_future.py", line 400, in poll\n'
    "    raise _zmq.ZMQError(_zmq.ENOTSUP)\n"
    "zmq.error.ZMQError: Operation not supported\n"
)
_ENGINE_GONE = (
    "Traceback (most recent call last):\n"
    '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
    '  File "/py/vllm/entrypoints/openai/api_server.py", line 210, in '
    "build_async_engine_client_from_engine_args\n"
    "    raise RuntimeError(\n"
    "RuntimeError: Engine process failed to start. See stack trace for the root cause.\n"
)
_HEAD = (
    "INFO 01-16 18:10:46 api_server.py:585] vLLM API server version 0.6.4.post1\n"
    "INFO 01-16 18:11:59 gpu_executor.py:113] # GPU blocks: 20671, # CPU blocks: 11915\n"
)


def test_an_orphaned_tasks_exception_reported_at_teardown_is_not_the_cause():
    d = triage_text(_HEAD + _ORPHAN + _ORPHAN + _ENGINE_GONE)
    assert d.root_cause.exception == "RuntimeError"
    assert d.root_cause.line == 2 + 2 * 8 + 5
    assert any(o.exception == "zmq.error.ZMQError" for o in d.other_errors)


def test_a_copy_whose_report_line_was_cut_off_is_still_the_orphaned_tasks():
    # a log committed from its middle: the first copy's "Task exception was never retrieved"
    # and header are gone, the next copies still carry the report
    cut = _ORPHAN.split("\n", 3)[3]  # from its first frame on
    d = triage_text(_HEAD + cut + _ORPHAN + _ENGINE_GONE)
    assert d.root_cause.exception == "RuntimeError"


def test_the_same_exception_without_the_orphan_report_is_the_cause():
    # raised in the process's own call, not reported at collection: it is an unknown exception
    # printed before the echo, and comes first
    plain = _ORPHAN.split("\n", 2)[2]
    d = triage_text(_HEAD + plain + _ENGINE_GONE)
    assert d.root_cause.exception == "zmq.error.ZMQError"


# vLLM 0.21's API server stopped by SIGTERM while transformers' tokenizer loader asked the Hub
# for the repo's chat templates: the traceback of the stop, innermost last, from the handler
# (vllm/entrypoints/openai/api_server.py signal_handler) down through httpx/httpcore to the
# ssl read. As committed in https://github.com/shiroyo-0/ai-agent-train/blob/
# e04d3b94b81bd5e0d12d39b033c6298ae4d07a3b/vllm_server.log (frames shortened, prefixes kept).
_A = "(APIServer pid=8410) "
_SITE = "/root/.venv/lib/python3.14/site-packages"
_STDLIB = "/root/.local/share/uv/python/cpython-3.14.5-linux-x86_64-gnu/lib/python3.14"
_STOP_HEAD = (
    f"{_A}INFO 05-25 10:54:28 [model.py:1697] Using max model len 512\n"
    f"{_A}Traceback (most recent call last):\n"
    f'{_A}  File "<frozen runpy>", line 203, in _run_module_as_main\n'
    f'{_A}  File "{_SITE}/vllm/entrypoints/openai/api_server.py", line 733, in <module>\n'
    f"{_A}    uvloop.run(run_server(args))\n"
    f'{_A}  File "{_SITE}/transformers/tokenization_utils_base.py", line 1672, in from_pretrained\n'
    f"{_A}    for template in list_repo_templates(\n"
)
_HUB_READ = (
    f'{_A}  File "{_SITE}/transformers/utils/hub.py", line 134, in list_repo_templates\n'
    f"{_A}    for entry in list_repo_tree(\n"
    f'{_A}  File "{_SITE}/huggingface_hub/hf_api.py", line 3830, in list_repo_tree\n'
    f"{_A}    for path_info in paginate(path=tree_url, headers=headers):\n"
    f'{_A}  File "{_SITE}/httpx/_client.py", line 1053, in get\n'
    f"{_A}    return self.request(\n"
    f'{_A}  File "{_SITE}/httpcore/_backends/sync.py", line 128, in read\n'
    f"{_A}    return self._sock.recv(max_bytes)\n"
    f'{_A}  File "{_STDLIB}/ssl.py", line 1152, in read\n'
    f"{_A}    return self._sslobj.read(len)\n"
)
_HANDLER = (
    f'{_A}  File "{_SITE}/vllm/entrypoints/openai/api_server.py", line 579, in signal_handler\n'
    f'{_A}    raise KeyboardInterrupt("terminated")\n'
    f"{_A}KeyboardInterrupt: terminated\n"
)


def test_a_process_stopped_while_blocked_in_a_read_rests_on_the_call_that_waited():
    d = triage_text(_STOP_HEAD + _HUB_READ + _HANDLER)
    assert d.root_cause.line == 8  # transformers' hub call, the first frame outside the plumbing
    assert "list_repo_templates" in d.root_cause.explanation
    assert d.root_cause.exception == "KeyboardInterrupt"


def test_a_process_stopped_while_computing_rests_on_the_stop():
    # the signal came while a library's own frame ran (no read under the handler): no wait to name
    computing = (
        f'{_A}  File "{_SITE}/transformers/tokenization_utils_base.py", line 2301, '
        "in _from_pretrained\n"
        f"{_A}    tokenizer = cls(*init_inputs, **init_kwargs)\n"
    )
    d = triage_text(_STOP_HEAD + computing + _HANDLER)
    assert d.root_cause.line == 12  # the KeyboardInterrupt line
    assert d.root_cause.exception == "KeyboardInterrupt"


# FlashInfer's JIT building a decode kernel for an FP4 KV cache, its ninja output carried in
# the exception's message, with SGLang's "Capture cuda graph failed: <that message>" around
# it (flashinfer/jit/cpp_ext.py run_ninja; sglang/srt/model_executor/cuda_graph_runner.py).
# As committed in https://github.com/jethac/dgx-spark-hijinks/blob/
# 61d0a48745223b7d51dd481059afae3bfc1f74d8/results/
# sglang_qwen25_1_5b_fp4kv_patched_flashinfer_20260608T0349JST_startup.log (paths shortened).
_NINJA_HEAD = (
    "[2026-06-07 18:49:45] Capture cuda graph begin. This can take up to several minutes.\n"
    "Traceback (most recent call last):\n"
    '  File "/py/sglang/srt/model_executor/cuda_graph_runner.py", line 716, in __init__\n'
    "    raise Exception(\n"
    "Exception: Capture cuda graph failed: Ninja build failed. Ninja output:\n"
    "ninja: Entering directory `/root/.cache/flashinfer/121a/cached_ops/batch_decode_kv_fp4'\n"
    "[1/4] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c batch_decode.cu\n"
    "FAILED: [code=1] batch_decode.cuda.o\n"
)
_NVCC_ERROR = (
    "/py/flashinfer/data/include/flashinfer/vec_dtypes.cuh(117): error: no suitable conversion "
    'function from "const Params::DTypeKV" to "float" exists\n'
    "        dst[i] = (dst_t)src[i];\n"
    "1 error detected in the compilation of \"batch_decode.cu\".\n"
)
_NINJA_TAIL = (
    "ninja: build stopped: subcommand failed.\n"
    "\n"
    "[2026-06-07 18:49:51] Received sigquit from a child process. "
    "It usually means the child failed.\n"
)


def test_a_failed_builds_exception_rests_on_the_compilers_first_error_in_its_output():
    d = triage_text(_NINJA_HEAD + _NVCC_ERROR + _NINJA_TAIL)
    assert d.root_cause.line == 9
    assert "no suitable conversion" in d.root_cause.excerpt
    assert d.root_cause.signature == "sglang-capture-failed"  # the report keeps what it knows


def test_gccs_error_format_is_read_the_same():
    gcc = "/py/flashinfer/csrc/decode.cu:42:10: fatal error: cuda_fp4.h: No such file\n"
    d = triage_text(_NINJA_HEAD + gcc + _NINJA_TAIL)
    assert d.root_cause.line == 9


def test_a_build_output_without_a_compiler_error_leaves_the_exception_where_it_was_printed():
    d = triage_text(_NINJA_HEAD + _NINJA_TAIL)
    assert d.root_cause.line == 5


def test_a_stop_inside_the_standard_librarys_own_computation_is_no_wait():
    # Ctrl-C during torch.compile's cache-key pickling, which was inside typing.py's
    # __getattr__: the standard library was computing, not blocked in a read, so the stop stays
    # the answer (as committed in https://github.com/Srichakra-D/ContextMatch1/blob/
    # 6d3d4e09e4931aaa2d11af33f14e5e3fbaaa2c39/vllm_log.txt, shortened; Python's default SIGINT
    # handler leaves no frame of its own)
    e = "(EngineCore pid=3408798) "
    text = (
        f"{e}Traceback (most recent call last):\n"
        f'{e}  File "/home/sai/.venv/lib/python3.13/site-packages/torch/_inductor/codecache.py", '
        "line 629, in dumps\n"
        f"{e}    self.dump(obj)\n"
        f'{e}  File "/opt/miniconda3/lib/python3.13/typing.py", line 3817, in __getattr__\n'
        f'{e}    raise AttributeError(f"module {{__name__!r}} has no attribute {{attr!r}}")\n'
        f"{e}KeyboardInterrupt\n"
    )
    d = triage_text(text)
    assert d.root_cause.line == 6


def test_a_stop_while_waiting_on_its_own_child_process_names_no_hang():
    # vLLM 0.9 inspects a model class in a subprocess; a training script's SIGTERM landed while
    # the server waited on it (subprocess/selectors under the handler: its own work, not a
    # service that did not answer), as committed in https://github.com/innocentbai/
    # Reason4Rec-GRPO/blob/2d762b5a75f304995be4731f3eac9d131a87ab2a/vllm_server.log (shortened)
    py = "/home/wdh/miniconda3/envs/grpo310/lib/python3.10"
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{py}/site-packages/vllm/model_executor/models/registry.py", line 592, '
        "in _run_in_subprocess\n"
        "    returned = subprocess.run(_SUBPROCESS_COMMAND,\n"
        f'  File "{py}/subprocess.py", line 505, in run\n'
        "    stdout, stderr = process.communicate(input, timeout=timeout)\n"
        f'  File "{py}/selectors.py", line 416, in select\n'
        "    fd_event_list = self._selector.poll(timeout)\n"
        f'  File "{py}/site-packages/vllm/entrypoints/openai/api_server.py", line 1307, '
        "in signal_handler\n"
        '    raise KeyboardInterrupt("terminated")\n'
        "KeyboardInterrupt: terminated\n"
    )
    d = triage_text(text)
    assert d.root_cause.line == 10


# --- a server stopped from outside after it served ------------------------------------------
# SGLang's readiness line and its scheduler's entry point (sglang/srt/entrypoints/http_server.py
# and managers/scheduler.py run_scheduler_process @v0.4.3): a notebook cell interrupted two
# minutes after "fired up" unwinds the scheduler with KeyboardInterrupt.
_SERVED = """\
[2025-02-20 08:41:42] INFO:     Application startup complete.
[2025-02-20 08:41:44] The server is fired up and ready to roll!
Process Process-1:
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "/usr/local/lib/python3.11/dist-packages/sglang/srt/managers/scheduler.py", line 1825, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.11/dist-packages/sglang/srt/managers/scheduler.py", line 494, in event_loop_overlap
    self.process_input_requests(recv_reqs)
{last}
[2025-02-20 08:43:53] INFO:     Shutting down
"""


def test_an_interruption_after_the_server_was_ready_is_a_stop_not_a_failure():
    d = triage_text(_SERVED.format(last="KeyboardInterrupt"))
    assert d.healthy and d.root_cause is None


def test_an_error_that_kills_the_scheduler_after_readiness_is_still_the_cause():
    d = triage_text(_SERVED.format(last="RuntimeError: CUDA error: an illegal memory access was encountered"))
    assert d.root_cause is not None and d.root_cause.exception == "RuntimeError"


def test_an_interruption_before_the_server_was_ready_stays_the_stop_of_the_start():
    log = _SERVED.replace("[2025-02-20 08:41:42] INFO:     Application startup complete.\n", "")
    log = log.replace("[2025-02-20 08:41:44] The server is fired up and ready to roll!\n", "")
    d = triage_text(log.format(last="KeyboardInterrupt"))
    assert not d.healthy and d.root_cause is not None and d.root_cause.exception == "KeyboardInterrupt"


# --- ollama: the runner's start is its readiness ----------------------------------------------
# ollama logs "llama runner started in N seconds" once its llama.cpp runner answers
# (llm/server.go WaitUntilRunning, ollama 0.11.7); a client that gives up later is logged as an
# ERROR "post predict ... context canceled" (a request's fate, not the launch's).
_OLLAMA = (
    'time=2025-08-30T15:08:18.262+05:00 level=INFO source=server.go:1231 msg="waiting for llama'
    ' runner to start responding"\n'
    "{ready}"
    'time=2025-08-30T15:15:27.964+05:00 level=ERROR source=server.go:1439 msg="post predict"'
    ' error="Post \\"http://127.0.0.1:41243/completion\\": context canceled"\n'
    '[GIN] 2025/08/30 - 15:15:27 | 500 |          7m4s |       127.0.0.1 | POST     "/v1/chat/completions"\n'
)
_RUNNER_READY = (
    'time=2025-08-30T15:09:21.849+05:00 level=INFO source=server.go:1269'
    ' msg="llama runner started in 63.59 seconds"\n'
)


def test_a_cancelled_request_after_ollamas_runner_started_is_no_failure():
    d = triage_text(_OLLAMA.format(ready=_RUNNER_READY))
    assert d.healthy and d.root_cause is None


def test_the_same_error_before_the_runner_started_is_still_reported():
    d = triage_text(_OLLAMA.format(ready=""))
    assert not d.healthy and d.root_cause is not None
