"""Issue 13, the round-four held batches' misses after they became dev rows: words the engines
(and torch under them) use for a start-up with no accelerator and for a missing dependency.
Each log is built from lines the programs print (the source of each is said beside it); each
test shows the mechanism decides one way and a neighbour the other."""

from __future__ import annotations

from servepilot.triage import triage_text

# vLLM >= 0.14 on a node whose process sees no GPU: Triton finds no driver
# (vllm/triton_utils/importing.py@v0.14.1), torch finds no CUDA runtime
# (torch/utils/cpp_extension.py), then EngineArgs.create_engine_config passes
# current_platform.device_type, "" on UnspecifiedPlatform (vllm/platforms/interface.py@v0.14.1),
# to DeviceConfig, whose __post_init__ calls torch.device("") (vllm/config/device.py@v0.14.1).
NO_DEVICE = (
    "INFO 04-28 01:32:18 [importing.py:44] Triton is installed but 0 active driver(s) found "
    "(expected 1). Disabling Triton to prevent runtime errors.\n"
    "W0428 01:32:20.020000 2163909 torch/utils/cpp_extension.py:118] No CUDA runtime is found, "
    "using CUDA_HOME='/usr/local/cuda'\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.10/site-packages/vllm/engine/arg_utils.py", line 1351, in '
    "create_engine_config\n"
    "    device_config = DeviceConfig(device=cast(Device, current_platform.device_type))\n"
    '  File "/venv/lib/python3.10/site-packages/vllm/config/device.py", line 73, in '
    "__post_init__\n"
    "    self.device = torch.device(self.device_type)\n"
    "{error}\n"
)


def test_an_empty_device_string_from_vllms_platform_is_no_visible_gpu():
    d = triage_text(NO_DEVICE.format(error="RuntimeError: Device string must not be empty"))
    assert d.root_cause.category == "cuda_driver_arch"
    assert d.root_cause.signature == "no-cuda-gpu"
    assert d.root_cause.line == 8


def test_a_device_string_torch_cannot_parse_is_not_read_as_no_gpu():
    # torch's refusal of a malformed device given explicitly (c10/core/Device.cpp): a typo in
    # the command, with the GPU present
    d = triage_text(NO_DEVICE.format(error="RuntimeError: Invalid device string: 'cuda:x'"))
    assert d.root_cause.category != "cuda_driver_arch"
    assert d.root_cause.line == 8


# vLLM's compressed-tensors quantization config importing the compressed-tensors package
# (vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py@v0.19.0,
# "from compressed_tensors.transform import TransformConfig") while the API server resolves
# the model config; CPython names the whole dotted module when only its last part is missing.
IMPORT_CHAIN = (
    "(APIServer pid=1) Traceback (most recent call last):\n"
    '(APIServer pid=1)   File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/'
    'layers/quantization/compressed_tensors/compressed_tensors.py", line 19, in <module>\n'
    "(APIServer pid=1)     from {module} import TransformConfig\n"
    "(APIServer pid=1) ModuleNotFoundError: No module named '{module}'\n"
)


def test_a_submodule_missing_from_an_installed_library_is_a_version_drift_not_its_feature():
    d = triage_text(IMPORT_CHAIN.format(module="compressed_tensors.transform"))
    assert d.root_cause.category == "other"
    assert "'compressed_tensors' is installed" in d.root_cause.explanation
    assert d.root_cause.line == 4


def test_the_library_missing_altogether_still_names_the_feature_that_needs_it():
    # Python names the top package alone when it is not installed at all
    d = triage_text(IMPORT_CHAIN.format(module="compressed_tensors"))
    assert d.root_cause.category == "quantization_support"


def test_the_engines_own_vendored_kernels_missing_keep_their_words():
    # vllm/v1/attention/backends/fa_utils.py@v0.19.0 imports
    # vllm.vllm_flash_attn.flash_attn_interface; a build without the vendored kernels lacks it
    d = triage_text(IMPORT_CHAIN.format(module="vllm.vllm_flash_attn.flash_attn_interface"))
    assert d.root_cause.category == "attention_backend"


def test_the_gguf_loaders_refusal_quoted_by_a_reporter_is_an_unsupported_model():
    # transformers/modeling_gguf_pytorch_utils.py@v4.42.4 load_gguf_checkpoint:
    # "Architecture {architecture} not supported", which vLLM 0.5.4 reaches through
    # AutoConfig.from_pretrained(gguf_file=...); here in a reporter's code marks
    d = triage_text("`gemma-2-27b-it-GGUF`: `Architecture gemma2 not supported`\n")
    assert d.root_cause.category == "unsupported_arch"
    assert d.root_cause.line == 1


def test_a_gpu_architecture_not_supported_stays_the_gpus():
    d = triage_text("`RuntimeError: GPU architecture sm_120 not supported`\n")
    assert d.root_cause.category == "cuda_driver_arch"


# SGLang prefill/decode disaggregation on Ascend: the scheduler builds the KV pool
# (sglang/srt/model_executor/model_runner.py@v0.5.9 "KV Cache is allocated"), then the KV
# transfer engine fails to reach its store
# (sglang/srt/disaggregation/ascend/transfer_engine.py@v0.5.9 raises the last line).
ASCEND_PD = (
    "[2026-04-14 11:56:52] KV Cache is allocated. #tokens: 1881728, K size: 10.77 GB, "
    "V size: 10.77 GB\n"
    "[2026-04-14 11:56:52] Memory pool end. avail mem=6.08 GB\n"
    "RuntimeError: {message}\n"
)


def test_a_disaggregation_transfer_engine_failing_to_start_is_the_processes_link():
    d = triage_text(ASCEND_PD.format(message="Ascend Transfer Engine initialization failed."))
    assert d.root_cause.category == "nccl_distributed"
    assert d.root_cause.basis == "engine-source"
    assert d.root_cause.line == 3


def test_the_transfer_engine_table_entry_reaches_no_other_disaggregation_module():
    import importlib.util
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "tools" / "harvest_engine_messages.py"
    spec = importlib.util.spec_from_file_location("harvest_engine_messages_r4", script)
    harvest = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = harvest
    try:
        spec.loader.exec_module(harvest)
        on = "sglang/srt/disaggregation/ascend/transfer_engine.py"
        off = "sglang/srt/disaggregation/ascend/conn.py"
        message = "Ascend Transfer Engine initialization failed."
        assert harvest.categorise("sglang", on, message) == "nccl_distributed"
        assert harvest.categorise("sglang", off, message) != "nccl_distributed"
    finally:
        sys.modules.pop(spec.name, None)


# vLLM V1's profiling run (vllm/v1/worker/gpu_model_runner.py@v0.8.5 profile_run ->
# _dummy_sampler_run, which re-raises the sampler's OOM in its own words), under the engine
# core's start-up report (vllm/v1/engine/core.py@v0.8.5).
SAMPLER_WARMUP = (
    "ERROR 05-30 10:02:11 [core.py:396] EngineCore failed to start.\n"
    "ERROR 05-30 10:02:11 [core.py:396] Traceback (most recent call last):\n"
    'ERROR 05-30 10:02:11 [core.py:396]   File "/usr/local/lib/python3.12/site-packages/vllm/'
    'v1/worker/gpu_model_runner.py", line 1549, in {frame}\n'
    "ERROR 05-30 10:02:11 [core.py:396]     raise RuntimeError(\n"
    "ERROR 05-30 10:02:11 [core.py:396] RuntimeError: {message}\n"
)


def test_an_oom_of_vllms_sampler_warm_up_is_the_memory_the_kv_cache_left():
    d = triage_text(SAMPLER_WARMUP.format(
        frame="<module>",
        message="CUDA out of memory occurred when warming up sampler with 1024 dummy requests. "
        "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the "
        "engine.",
    ))
    assert d.root_cause.category == "oom_kv_cache"
    assert d.root_cause.signature == "vllm-sampler-warmup-oom"
    assert d.root_cause.line == 5


def test_a_plain_oom_in_the_same_runner_file_stays_the_weights():
    # torch's OOM (c10/cuda/CUDACachingAllocator.cpp) raised while the model loads
    d = triage_text(SAMPLER_WARMUP.format(
        frame="load_model",
        message="CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity "
        "of 23.64 GiB of which 1.02 GiB is free.",
    ))
    assert d.root_cause.category == "oom_weights"


# vllm-ascend's worker wrapping a torch_npu graph-capture failure
# (vllm_ascend/worker/model_runner_v1.py "NPUModelRunner failed, error is {e}"; torch_npu
# csrc/core/npu/NPUGraph.cpp capture_begin calling CANN's aclmdlRICaptureBegin), logged line by
# line at ERROR by vLLM's worker (vllm/v1/executor/multiproc_executor.py@v0.19.0), pasted from
# a code line whose frame line was cut off.
_W = "(Worker_TP3_EP3 pid=317) ERROR 07-14 06:35:03 [multiproc_executor.py:962] "
NPU_WORKER = "".join(
    _W + line + "\n"
    for line in (
        "    self.gen.throw(value)",
        '  File "/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py", line 4995,'
        " in _replace_gpu_model_runner_function_wrapper",
        '    raise RuntimeError(f"NPUModelRunner failed, error is {e}")',
        "RuntimeError: NPUModelRunner failed, error is {error}",
    )
)


def test_npu_graph_capture_failing_is_graph_capture_and_the_exception_is_the_line():
    error = (
        "capture_begin:../torch_npu/csrc/core/npu/NPUGraph.cpp:230 NPU function error: "
        "c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207005"
    )
    d = triage_text(NPU_WORKER.replace("{error}", error))
    assert d.root_cause.category == "cuda_graph"
    assert d.root_cause.line == 4  # not the code line the paste starts with


def test_another_npu_function_error_in_the_same_wrapper_is_not_graph_capture():
    error = (
        "matmul:../torch_npu/csrc/aten/ops/MatmulKernelNpu.cpp:88 NPU function error: "
        "call aclnnMatmul failed, error code is 507015"
    )
    d = triage_text(NPU_WORKER.replace("{error}", error))
    assert d.root_cause.category != "cuda_graph"
    assert d.root_cause.line == 4


def test_an_error_message_before_a_cut_traceback_still_stands_on_its_own_line():
    # an unindented ERROR line is a message, not a traceback's code: it keeps its place
    log = _W + "No CUDA GPUs are available\n" + NPU_WORKER.split("\n", 1)[1].replace(
        "{error}", "boom"
    )
    d = triage_text(log)
    assert d.root_cause.category == "cuda_driver_arch"
    assert d.root_cause.line == 1


def test_a_kernel_packages_missing_module_stays_the_backend_that_needs_it():
    # an attention kernel package lacking a module: choosing another attention backend is
    # the way past it, whatever made the module absent
    d = triage_text(IMPORT_CHAIN.format(module="flash_attn.flash_attn_interface"))
    assert d.root_cause.category == "attention_backend"
