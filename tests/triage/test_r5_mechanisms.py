"""Issue 13, round-five misses: a GGUF tensor type newer than the llama.cpp build, and Docker
refusing to publish a port that is already taken. Each log is built from lines the programs
print (the source of each is said beside it); each test shows the mechanism decides one way
and a neighbour the other."""

from __future__ import annotations

from servepilot.triage import triage_text

# llama.cpp's GGUF reader refusing a tensor type id past its type table
# (ggml/src/gguf.cpp gguf_init_from_file_impl, llama-cpp-python 0.3.36 vendored llama.cpp:
# "tensor '%s' has invalid ggml type %d. should be in [0, %d)", then "failed to read tensor
# info"), and the loader's echoes (src/llama-model-loader.cpp, src/llama.cpp llama_model_load).
_LOAD_ECHOES = (
    "gguf_init_from_file_impl: failed to read tensor info\n"
    "llama_model_load: error loading model: llama_model_loader: failed to load model from "
    "/models/m.gguf\n"
)


def _gguf_type_log(type_text: str) -> str:
    return (
        "llama_model_loader: loaded meta data with 3 key-value pairs and 291 tensors\n"
        "gguf_init_from_file_impl: tensor 'blk.0.ffn_up.weight' has invalid ggml type "
        f"{type_text}\n"
        + _LOAD_ECHOES
    )


def test_a_tensor_type_just_past_the_builds_table_is_a_quantization_the_build_lacks():
    d = triage_text(_gguf_type_log("41. should be in [0, 40)"))
    assert d.root_cause.signature == "llamacpp-ggml-type-newer-than-build"
    assert d.root_cause.category == "quantization_support"
    assert d.root_cause.line == 2


def test_the_older_wording_naming_the_type_none_reads_the_same():
    # older builds name the type through ggml_type_name, "NONE" past the table
    # (ggml/src/ggml.c, llama-cpp-python 0.3.2 vendored llama.cpp)
    d = triage_text(_gguf_type_log("39 (NONE)"))
    assert d.root_cause.category == "quantization_support"
    assert d.root_cause.line == 2


def test_a_garbage_type_id_is_a_corrupt_file_not_a_newer_format():
    # a truncated or damaged file reads an arbitrary 32-bit number as the type
    d = triage_text(_gguf_type_log("1735289204. should be in [0, 40)"))
    assert d.root_cause.signature == "llamacpp-gguf-invalid"
    assert d.root_cause.category == "other"


# `docker run -p 8000:8000 vllm/vllm-openai` when the host port is held: the Docker CLI prints
# the daemon's error, whose tail is the port allocator's (moby libnetwork/portallocator
# ErrPortAlreadyAllocated), and the usage hint; the engine never starts.
DOCKER_PORT_TAKEN = (
    "docker: Error response from daemon: failed to set up container networking: driver failed "
    "programming external connectivity on endpoint eager_lamport (3f2a9c0b): Bind for "
    "0.0.0.0:8000 failed: port is already allocated\n"
    "\n"
    "Run 'docker run --help' for more information\n"
)


def test_docker_refusing_a_taken_host_port_is_a_port_in_use():
    d = triage_text(DOCKER_PORT_TAKEN)
    assert d.root_cause.signature == "docker-port-allocated"
    assert d.root_cause.category == "port_in_use"
    assert d.root_cause.line == 1


def test_another_docker_daemon_error_is_not_a_port_in_use():
    # the daemon's answer when the image's runtime is unknown (moby daemon), same prefix
    d = triage_text(
        "docker: Error response from daemon: unknown or invalid runtime name: nvidia.\n"
        "\n"
        "Run 'docker run --help' for more information\n"
    )
    assert d.root_cause is None or d.root_cause.category != "port_in_use"


# vLLM 0.8.5 with Ray and fewer GPUs than --tensor-parallel-size: the placement-group warning
# and its waits (vllm/executor/ray_utils.py@v0.8.5 _verify_bundles / _wait_until_pg_ready),
# then the launch stopped from outside with SIGTERM: Ray's handler exits with the signal
# number (ray/_private/worker.py sigterm_handler, sys.exit(signum)) inside the KeyboardInterrupt
# vLLM raised, and run_mp_engine logs the exception with logger.exception(e)
# (vllm/engine/multiprocessing/engine.py@v0.8.5), whose first line is str(e): "15".
_PG_WARNING = (
    "WARNING 05-26 18:53:53 [ray_utils.py:342] The number of required GPUs exceeds the total "
    "number of available GPUs in the placement group.\n"
    "INFO 05-26 18:54:03 [ray_utils.py:233] Waiting for creating a placement group of specs "
    "for 10 seconds. specs=[{'GPU': 1.0}, {'GPU': 1.0}]. Check `ray status` and `ray list "
    "nodes` to see if you have enough resources.\n"
)
_E = "ERROR 05-26 18:58:11 [engine.py:448] "
_STOPPED = (
    f"{_E}15\n"
    f"{_E}Traceback (most recent call last):\n"
    f'{_E}  File "/venv/lib/python3.12/site-packages/ray/_private/worker.py", line 3053, in wait\n'
    f"{_E}    ready_ids, remaining_ids = worker.core_worker.wait(\n"
    f"{_E}KeyboardInterrupt\n"
    f"{_E}\n"
    f"{_E}During handling of the above exception, another exception occurred:\n"
    f"{_E}\n"
    f"{_E}Traceback (most recent call last):\n"
    f'{_E}  File "/venv/lib/python3.12/site-packages/ray/_private/worker.py", line 1539, in '
    "sigterm_handler\n"
    f"{_E}    sys.exit(signum)\n"
    f"{_E}SystemExit: 15\n"
)


def test_a_launch_stopped_while_waiting_is_explained_by_what_it_waited_on():
    d = triage_text(_PG_WARNING + _STOPPED)
    assert d.root_cause.signature == "ray-placement-gpus"
    assert d.root_cause.category == "nccl_distributed"
    assert d.root_cause.line == 1


def test_a_real_error_after_the_warning_still_outranks_it():
    # a fatal exception of the engine's own is not an interruption
    d = triage_text(
        _PG_WARNING
        + f"{_E}Traceback (most recent call last):\n"
        + f'{_E}  File "/venv/lib/python3.12/site-packages/vllm/worker/worker.py", line 9, in x\n'
        + f"{_E}    raise RuntimeError(msg)\n"
        + f"{_E}RuntimeError: Something unexpected in the worker\n"
    )
    assert d.root_cause.exception == "RuntimeError"
    assert d.root_cause.line == 6


def test_an_interruption_alone_is_still_reported():
    d = triage_text(_STOPPED)
    assert d.root_cause is not None
    assert d.root_cause.category != "nccl_distributed"


# vllm-ascend refusing a feature on the 310P SoC (vllm_ascend/_310p/attention/attention_mask.py
# get_attention_mask raises NotImplementedError("310P does not support runner_type='pooling'")):
# the device generation is what lacks the feature, as a CUDA build without kernels for a GPU.
def test_an_ascend_soc_refusing_a_feature_is_a_device_limit():
    d = triage_text("NotImplementedError: 310P does not support runner_type='pooling'\n")
    assert d.root_cause.category == "cuda_driver_arch"


def test_a_refusal_without_a_device_generation_names_no_device():
    for text in (
        "NotImplementedError: this layer does not support runner_type='pooling'\n",
        "ValueError: model 910 does not support runner_type='pooling'\n",
    ):
        assert triage_text(text).root_cause.category != "cuda_driver_arch", text


# llama-server start-up (llama-cpp-python v0.3.36 vendor/llama.cpp): ggml_cuda_init's device
# line (ggml/src/ggml-cuda/ggml-cuda.cu), common's system_info line with the build's CUDA
# architectures (common/common.cpp; the ARCHS feature is __CUDA_ARCH_LIST__), then loading.
def _llama_server_start(archs: str) -> str:
    return (
        "ggml_cuda_init: found 1 CUDA devices:\n"
        "  Device 0: Tesla T4, compute capability 7.5, VMM: yes, VRAM: 14912 MiB\n"
        "build: 8836 (83d58e02f) with GNU 13.3.0 for Linux x86_64\n"
        f"system_info: n_threads = 4 (n_threads_batch = 4) / 8 | CUDA : ARCHS = {archs} | "
        "USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | CPU : SSE3 = 1 | AVX2 = 1 |\n"
        "load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
    )


def test_a_build_for_newer_gpus_only_has_no_code_for_the_device():
    d = triage_text(_llama_server_start("1200"))
    assert d.root_cause.signature == "llamacpp-cuda-archs-leave-out-device"
    assert d.root_cause.category == "cuda_driver_arch"
    assert d.root_cause.line == 4


def test_a_build_with_an_architecture_the_device_can_run_is_no_fault():
    # 7.5 code runs on the T4; 5.2 PTX is compiled for it on first use
    for archs in ("750,800,860,890", "520,610"):
        d = triage_text(_llama_server_start(archs))
        assert d.root_cause is None or d.root_cause.category != "cuda_driver_arch", archs
