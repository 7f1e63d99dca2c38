"""Issue 13, round-four misses: words the engines (and the runtimes under them) use for a
binary without code for this GPU or CPU, a port torch could not listen on, and a missing
optional kernel package. Each log is built from lines the programs print (the source of each
is said beside it); each test shows the family decides one way and a neighbour the other."""

from __future__ import annotations

from servepilot.triage import triage_text

# vLLM's kernel warm-up calling DeepGEMM when the deep_gemm package is absent
# (vllm/model_executor/warmup/kernel_warmup.py@v0.19.0 kernel_warmup -> deep_gemm_warmup;
# vllm/utils/deep_gemm.py@v0.19.0 _missing raises the message), under the engine core's
# failure report (vllm/v1/engine/core.py@v0.19.0 run_engine_core).
DEEPGEMM_MISSING = (
    "(EngineCore_DP0 pid=41) ERROR 05-02 10:00:01 [core.py:708] EngineCore failed to start.\n"
    "(EngineCore_DP0 pid=41) ERROR 05-02 10:00:01 [core.py:708] Traceback (most recent call "
    "last):\n"
    '(EngineCore_DP0 pid=41) ERROR 05-02 10:00:01 [core.py:708]   File "/vllm/model_executor/'
    'warmup/kernel_warmup.py", line 37, in kernel_warmup\n'
    "(EngineCore_DP0 pid=41) ERROR 05-02 10:00:01 [core.py:708]     deep_gemm_warmup(model, "
    "max_tokens)\n"
    "(EngineCore_DP0 pid=41) ERROR 05-02 10:00:01 [core.py:708] RuntimeError: DeepGEMM backend "
    "is not available or outdated. Please install or update the `deep_gemm` to a newer version "
    "to enable FP8 kernels.\n"
)


def test_a_missing_deepgemm_package_is_a_missing_dependency_not_a_quantization_refusal():
    d = triage_text(DEEPGEMM_MISSING)
    assert d.root_cause.signature == "vllm-deepgemm-missing"
    assert d.root_cause.category == "other"
    assert d.root_cause.line == 5


def test_deepgemm_present_but_without_kernels_for_the_gpu_stays_an_architecture_fault():
    # DeepGEMM's own host assert (csrc/apis/hyperconnection.hpp, DG_HOST_ASSERT)
    d = triage_text(
        "tvm.error.InternalError: Assertion error (/deepgemm/csrc/apis/hyperconnection.hpp:56): "
        "Unsupported architecture\n"
    )
    assert d.root_cause.category == "cuda_driver_arch"


def test_torch_failing_to_listen_on_every_address_is_a_port_in_use():
    # torch/csrc/distributed/c10d/socket.cpp@v2.4.0 (SocketListenOp), as a wrapper printed it
    # with the last attempt's code as a bare number
    d = triage_text(
        "RuntimeError: The server socket has failed to listen on any local network address. "
        "port: 46571, useIpv6: 0, code: -9\n"
    )
    assert d.root_cause.category == "port_in_use"
    assert "46571" in d.root_cause.explanation


def test_torch_failing_to_connect_is_not_a_port_in_use():
    # the client side of the same file (SocketConnectOp): nobody listens there yet
    d = triage_text(
        "RuntimeError: The client socket has failed to connect to any network address of "
        "(10.0.0.2, 29500).\n"
    )
    assert d.root_cause.category != "port_in_use"


def test_ggml_cuda_without_device_code_for_the_gpu_is_an_architecture_fault():
    # ggml/src/ggml-cuda/common.cuh@0c1e57098 NO_DEVICE_CODE, and the older wording of
    # koboldcpp 1.55's ggml-cuda (corpus row koboldcpp-610)
    for line in (
        "ggml/src/ggml-cuda/mmq.cuh:3094: ERROR: CUDA kernel mul_mat_q has no device code "
        "compatible with CUDA arch 520. ggml-cuda.cu was compiled for: 600,610,700\n",
        "ERROR: ggml-cuda was compiled without support for the current GPU architecture.\n",
    ):
        assert triage_text(line).root_cause.category == "cuda_driver_arch", line


def test_hip_finding_no_code_object_is_the_cause_of_the_crash_after_it():
    # ROCm clr hipamd/src/hip_fatbin.cpp logs this with no level; the shell then reports the
    # server's crash (zsh's job report)
    crash = "zsh: segmentation fault  llama-server -m model.gguf -fa on\n"
    text = (
        ":1:hip_fatbin.cpp           :687 : 114369963532 us:  No compatible code objects found "
        "for: gfx1152, value of HIP_FORCE_SPIRV_CODEOBJECT: 0\n" + crash
    )
    d = triage_text(text)
    assert (d.root_cause.line, d.root_cause.category) == (1, "cuda_driver_arch")
    # the crash alone says nothing of why
    assert triage_text(crash).root_cause.category == "other"


def test_a_windows_exit_status_says_which_way_the_runner_died():
    # ollama llm/server.go: "llama runner process has terminated: exit status %x"; Windows
    # NTSTATUS (ntstatus.h): 0xC000001D STATUS_ILLEGAL_INSTRUCTION, 0xC0000409 the fail-fast
    # an abort() raises (what a GGML_ASSERT ends in): only the first names a cause
    illegal = triage_text("Error: llama runner process has terminated: exit status 0xc000001d\n")
    aborted = triage_text("Error: llama runner process has terminated: exit status 0xc0000409\n")
    assert illegal.root_cause.category == "cuda_driver_arch"
    assert aborted.root_cause.category == "other"


# ollama (llm/server.go@0084709c) keeps the runner's last error line and reports the runner's
# death as "llama runner process has terminated: <that line>"; the CLI prints what the server
# answered ("Error: 500 Internal Server Error: ..."). The runner's own lines come from
# llama.cpp's graph allocator (ggml/src/ggml-alloc.c ggml_gallocr_reserve_n) sizing the compute
# buffer when the context is created.
CLIENT_RETOLD = (
    "Error: 500 Internal Server Error: llama runner process has terminated: error:failed to "
    "allocate buffer, size = 33074.89 MiB\n"
)
RUNNER_OWN = "ggml_gallocr_reserve_n: failed to allocate Metal buffer of size 34681522080\n"


def test_a_retold_death_yields_to_the_dead_runners_own_line_pasted_after_it():
    d = triage_text(CLIENT_RETOLD + RUNNER_OWN)
    assert (d.root_cause.line, d.root_cause.category) == (2, "oom_kv_cache")


def test_a_retold_death_alone_is_read_from_the_words_it_retells():
    d = triage_text(CLIENT_RETOLD)
    assert d.root_cause.line == 1
    assert d.root_cause.category == "oom_weights"


def test_ollamas_exit_status_line_yields_to_the_detailed_message_it_announces():
    # the server's log (slog text format): the runner's exit, then the load error that carries
    # the runner's last line (a ggml assert, ggml/src/ggml.c GGML_ASSERT)
    text = (
        'time=2025-07-14T19:16:12.565+01:00 level=ERROR source=server.go:449 msg="llama runner '
        'terminated" error="exit status 0xc0000409"\n'
        'time=2025-07-14T19:16:12.750+01:00 level=ERROR source=sched.go:457 msg="error loading '
        'llama server" error="llama runner process has terminated: GGML_ASSERT(tensor->op == '
        'GGML_OP_UNARY) failed"\n'
    )
    d = triage_text(text)
    assert d.root_cause.line == 2
    assert d.root_cause.category == "other"


def test_vllms_own_spelling_of_bitsandbytes_names_the_quantization():
    # vLLM 0.5.4 refused bitsandbytes with CUDA graphs in these words (corpus row vllm-7294;
    # vllm/config.py@v0.5.5 spells it the same way in its refusals); a client of a hosted
    # server sees the exception's repr inside its own error
    d = triage_text(
        "openai.InternalServerError: internal server error: status Failure: "
        "ValueError('BitAndBytes with enforce_eager = False is not supported yet.')\n"
    )
    assert d.root_cause.category == "quantization_support"


# vLLM's worker start-up failure (vllm/v1/executor/multiproc_executor.py@v0.11.0 WorkerProc)
# under a GPUStack deployment summary that quotes the worker's exception in code marks (the
# assert of vllm/distributed/utils.py@v0.11.0 ensure_divisibility, "{} is not divisible by {}")
WORKER_ECHO = (
    "(Worker_TP4 pid=554) ERROR 12-08 15:37:59 [multiproc_executor.py:597] WorkerProc failed to "
    "start.\n"
)


def test_an_exception_a_wrapper_quotes_in_code_marks_is_reported_by_that_line():
    summary = (
        "Deployment failure due to incompatible GPU allocation: 6 cards are not divisible by the "
        "vocabulary size, breaking tensor parallelism constraints: "
        "`AssertionError: 151552 is not divisible by 6`\n"
    )
    d = triage_text(summary + WORKER_ECHO)
    assert (d.root_cause.line, d.root_cause.category) == (1, "tp_divisibility")
    # without the quoted exception the echo is all the log says
    assert triage_text(WORKER_ECHO).root_cause.category == "other"


def _flashinfer_jit_failure(message: str) -> str:
    # vLLM 0.23's engine core dying in the sampler warm-up: FlashInfer compiles its top-k/top-p
    # kernel on first use (flashinfer/jit/cpp_ext.py generate_ninja_build_for_op, get_cuda_path)
    return (
        "(EngineCore pid=7) ERROR 06-23 15:43:19 [core.py:1195] Traceback (most recent call "
        "last):\n"
        '(EngineCore pid=7) ERROR 06-23 15:43:19 [core.py:1195]   File "/env/site-packages/'
        'flashinfer/sampling.py", line 60, in get_sampling_module\n'
        '(EngineCore pid=7) ERROR 06-23 15:43:19 [core.py:1195]   File "/env/site-packages/'
        'flashinfer/jit/cpp_ext.py", line 61, in get_cuda_path\n'
        "(EngineCore pid=7) ERROR 06-23 15:43:19 [core.py:1195]     raise RuntimeError(\n"
        f"(EngineCore pid=7) ERROR 06-23 15:43:19 [core.py:1195] RuntimeError: {message}\n"
    )


def test_a_jit_compile_without_the_cuda_toolkit_is_the_toolkit_not_the_kernel_that_asked():
    d = triage_text(_flashinfer_jit_failure(
        "Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist"
    ))
    assert d.root_cause.category == "cuda_driver_arch"


def test_an_unknown_error_in_the_same_flashinfer_frames_is_still_placed_by_them():
    d = triage_text(_flashinfer_jit_failure("ninja: build stopped: subcommand failed."))
    assert d.root_cause.category == "attention_backend"


def test_a_missing_kernel_image_of_an_attention_kernel_is_the_attention_backends():
    # SGLang's kernels print "CUDA error (<file>:<line>): <cudaGetErrorString>"; the file named is
    # the kernel that has no image for the GPU: FlashAttention 3's Hopper forward kernel (built
    # only for sm90) against a norm kernel of sgl-kernel
    no_image = "): no kernel image is available for execution on the device\n"
    fa3 = triage_text(
        "CUDA error (_deps/repo-flash-attention-src/hopper/flash_fwd_launch_template.h:166"
        + no_image
    )
    norm = triage_text(
        "CUDA error (/sgl-kernel/csrc/elementwise/fused_add_rms_norm_kernel.cu:123" + no_image
    )
    assert fa3.root_cause.category == "attention_backend"
    assert norm.root_cause.category == "cuda_driver_arch"


def test_triton_names_the_kernel_it_cannot_build_for_the_gpu():
    # Triton's MLIR diagnostic, loc("<kernel source>.py":line:col), for vLLM's ROCm Triton
    # flash-attention kernel (vllm/attention/ops/triton_flash_attention.py@v0.6.6) on gfx906,
    # against a kernel outside attention
    unsupported = "): error: unsupported target: 'gfx906'\n"
    attention = triage_text(
        'loc("/opt/vllm/vllm/attention/ops/triton_flash_attention.py":309:0' + unsupported
    )
    other = triage_text(
        'loc("/opt/vllm/vllm/model_executor/layers/layernorm.py":309:0' + unsupported
    )
    assert attention.root_cause.category == "attention_backend"
    assert other.root_cause.category == "cuda_driver_arch"
