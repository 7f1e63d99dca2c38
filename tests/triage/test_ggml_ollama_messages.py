"""llama.cpp's refusals of every era and ollama's own: the harvester reads the ggml backends in
each of llama.cpp's three source layouts and ollama's Go sources (tools/harvest_engine_messages.py),
and triage names an error no signature knows by the template it was printed from.

Generator tests run the harvester's functions on small inline sources; tier tests use lines
printed from templates that are in the packaged data (each names its file@commit or file@tag;
the values filled in are made up, the words are the engine's).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from servepilot.datafile import resource_path
from servepilot.triage import triage_text
from servepilot.triage.engine_source import load_messages, match_engine_message
from servepilot.triage.signatures import Matcher, load_signatures

_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "harvest_engine_messages.py"


@pytest.fixture(scope="module")
def harvest():
    spec = importlib.util.spec_from_file_location("harvest_engine_messages_g", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


# ------------------------------------------------------------------ Go sources (ollama)

_GO = '''
package llm

func start() error {
	if systemMemoryRequired > available {
		return nil, fmt.Errorf("model requires more system memory (%s) than is available (%s)",
			format.HumanBytes2(systemMemoryRequired), format.HumanBytes2(available))
	}
	if err != nil {
		return fmt.Errorf("llama runner process has terminated: %w", err)
	}
	slog.Error("unable to load cudart library " + "for this driver", "error", err)
	slog.Info("no compatible GPUs were discovered")
	return errors.New(`kfd driver not loaded`)
}

func (e ErrNoMem) Error() string {
	return fmt.Sprintf("insufficient memory - required allocations: %+v", e.BackendMemory)
}
'''


def test_go_errors_logs_and_error_methods_become_templates(harvest):
    found = {(kind, t) for _line, kind, t in harvest.go_templates(_GO)}
    assert ("raise", "model requires more system memory ({}) than is available ({})") in found
    assert ("raise", "llama runner process has terminated: {}") in found
    assert ("log", "unable to load cudart library for this driver") in found
    assert ("raise", "kfd driver not loaded") in found  # a raw string
    assert ("raise", "insufficient memory - required allocations: {}") in found
    # an info-level log is not an error
    assert not any("no compatible GPUs" in t for _k, t in found)


@pytest.mark.parametrize(
    "path, template, category",
    [
        # ollama's GPU discovery refuses a device: the driver's side
        (
            "discover/amd_linux.go",
            "no compatible amdgpu devices detected",
            "cuda_driver_arch",
        ),
        # its memory estimate refuses the model: memory (llm/server.go@v0.12.0)
        (
            "llm/server.go",
            "model requires more system memory ({}) than is available ({})",
            "oom_weights",
        ),
        # ...and its layout search (llm/server.go@v0.12.0) that finds no GPU placement fitting
        (
            "llm/server.go",
            "memory layout cannot be allocated with num_gpu = {}",
            "oom_weights",
        ),
        # its own GGUF reader refusing a quantization (fs/ggml/type.go@v0.32.15)
        (
            "fs/ggml/type.go",
            "unsupported quantization type {} - supported types are {}",
            "quantization_support",
        ),
        # the runner exiting is a retelling of whatever killed it: not evidence of one kind
        ("llm/server.go", "llama runner process has terminated: {}", None),
    ],
)
def test_ollama_modules_decide_the_category(harvest, path, template, category):
    assert harvest.categorise("ollama", path, template) == category


def test_ollama_tests_are_not_read(harvest):
    assert harvest.module_category("ollama", "discover/gpu_test.go") == (False, None)


# ------------------------------------------------------------------ llama.cpp's three layouts


@pytest.mark.parametrize(
    "path, expected",
    [
        ("ggml-cuda.cu", (True, "cuda_driver_arch")),  # 2023: every file at the root
        ("ggml-metal.m", (True, "cuda_driver_arch")),
        ("ggml-sycl.cpp", (True, "cuda_driver_arch")),
        ("ggml/src/ggml-rpc/ggml-rpc.cpp", (True, "cuda_driver_arch")),  # 2025: a folder each
        ("ggml/src/ggml-cpu/ggml-cpu.c", (True, "cuda_driver_arch")),
        ("llama.cpp", (True, None)),  # the whole library in one file: mixed, keywords decide
        ("src/llama.cpp", (True, None)),
        ("ggml-backend.c", (True, None)),
        # one message for compute buffers and weights alike (ggml-alloc.c@0c1e57098): not read
        ("ggml/src/ggml-alloc.c", (False, None)),
        # generated shaders and the Kompute library vendored inside the backend: not read
        ("ggml/src/ggml-kompute/kompute/src/Sequence.cpp", (False, None)),
        ("ggml/src/ggml-vulkan/vulkan-shaders/vulkan-shaders-gen.cpp", (False, None)),
        # a tool that is not the server
        ("examples/quantize/quantize.cpp", (False, None)),
    ],
)
def test_every_layout_of_llamacpp_is_read(harvest, path, expected):
    assert harvest.module_category("llama.cpp", path) == expected


@pytest.mark.parametrize(
    "path, template, category",
    [
        # ggml-rpc.cpp@0c1e57098: a sized buffer the device cannot give is memory...
        ("ggml/src/ggml-rpc/ggml-rpc.cpp", "Failed to allocate input buffer of size {}", "oom_weights"),
        # ...a missing device is the driver's side
        ("ggml/src/ggml-vulkan/ggml-vulkan.cpp", "Invalid Vulkan device index", "cuda_driver_arch"),
        # ggml-kompute.cpp@8733e0cf6
        ("ggml/src/ggml-kompute/ggml-kompute.cpp", "Error allocating vulkan memory.", "oom_weights"),
        (
            "ggml/src/ggml-kompute/ggml-kompute.cpp",
            "Memory type index for buffer creation not found",
            "cuda_driver_arch",
        ),
        # common/chat.cpp@0c1e57098: a chat template the server cannot set up is the template's;
        # a request's tool-call parse error in the same module names no kind: not kept
        (
            "common/chat.cpp",
            "{}: please consider disabling jinja via --no-jinja, or using another chat template",
            "tokenizer_template",
        ),
        ("common/chat.cpp", "Failed to parse tool call arguments as JSON:", None),
        # the single-file src/llama.cpp (0.2.79 .. 0.3.2): keywords sort its refusals
        ("src/llama.cpp", "unable to allocate backend buffer", "oom_weights"),
        ("src/llama.cpp", "{}: failed to allocate context for kv cache", "oom_kv_cache"),
        ("llama.cpp", "unknown model architecture: '{}'", "unsupported_arch"),
    ],
)
def test_llamacpp_module_and_words_decide_the_category(harvest, path, template, category):
    assert harvest.categorise("llama.cpp", path, template) == category


# ------------------------------------------------------------------ the packaged data


def _data() -> dict:
    return json.loads(
        resource_path("servepilot.triage", "engine_messages.json").read_text(encoding="utf-8")
    )


def test_llamacpp_is_harvested_from_releases_of_every_year_and_ollama_from_its_tags():
    harvested = _data()["harvested"]
    assert len(harvested["llama.cpp"]) >= 8  # llama-cpp-python 0.2.20 (Nov 2023) .. 0.3.36
    assert "b38a16dfc" in harvested["llama.cpp"] and "0c1e57098" in harvested["llama.cpp"]
    assert {"v0.1.20", "v0.32.15"} <= set(harvested["ollama"])
    ollama = [e for e in _data()["entries"] if e.get("project") == "ollama"]
    assert len(ollama) >= 30
    # filed under the engine it wraps, with ollama's own file@tag
    assert all(e["engine"] == "llama.cpp" and "@v0." in e["source"] for e in ollama)


def _entry(template: str):
    found = [m for m in load_messages() if m.template == template]
    assert found, f"not in engine_messages.json: {template!r}"
    return found[0]


# (a line as the engine or ollama prints it, its template, category); none is a signature's
TIER_CASES = [
    # ollama llm/server.go@v0.12.0: no split of the layers over the GPUs fits (-> the CLI's
    # "Error: " line)
    (
        "Error: memory layout cannot be allocated with num_gpu = 99",
        "memory layout cannot be allocated with num_gpu = {}",
        "oom_weights",
    ),
    # ollama ml/device.go@v0.32.15: the backend's allocation failure (ErrNoMem's text), as
    # the CLI prints a failed load ("Error: ...")
    (
        "Error: insufficient memory - required allocations: {InputWeights:1048576A "
        "CPU:{Name:CPU Weights:[1 2 3]}}",
        "insufficient memory - required allocations: {}",
        "oom_weights",
    ),
    # ollama server/sched.go@v0.32.15: a GGUF its bundled llama.cpp cannot read ("some older
    # models are not compatible with newer versions of llama.cpp", the code's own comment)
    (
        "Error: unsupported model format: this model may be incompatible with your version of "
        "Ollama. If you previously pulled this model, try updating it by running "
        "`ollama pull foo:7b`",
        "{}: this model may be incompatible with your version of Ollama. If you previously "
        "pulled this model, try updating it by running `ollama pull {}`",
        "unsupported_arch",
    ),
    # llama.cpp from b38a16dfc (llama-cpp-python 0.2.20, Nov 2023) to 74d73dc85, the
    # single-file llama.cpp / src/llama.cpp: the KV cache could not be made
    (
        "llama_new_context_with_model: llama_kv_cache_init() failed for self-attention cache",
        "{}: llama_kv_cache_init() failed for self-attention cache",
        "oom_kv_cache",
    ),
    # ggml-rpc.cpp@0c1e57098: the RPC server cannot give the buffer asked for
    (
        "Failed to allocate input buffer of size 1073741824",
        "Failed to allocate input buffer of size {}",
        "oom_weights",
    ),
]


@pytest.mark.parametrize("line, template, category", TIER_CASES, ids=[c[2] for c in TIER_CASES])
def test_a_llamacpp_or_ollama_refusal_no_signature_knows_is_named_by_its_source(
    line, template, category
):
    entry = _entry(template)
    assert entry.category == category
    assert Matcher(load_signatures()).match(line) is None
    assert match_engine_message(line, "llama.cpp") == entry
    log = (
        "llama_model_loader: loaded meta data with 24 key-value pairs\n"
        "llm_load_print_meta: model type = 7B\n"
        f"{line}\n"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.signature is None
    assert (rc.category, rc.basis) == (category, "engine-source")
    assert entry.source in rc.explanation


def test_a_device_message_of_the_same_backend_is_not_read_as_memory():
    # ggml-kompute.cpp@8733e0cf6: the same backend's device fault, no allocation in it
    entry = _entry("Memory type index for buffer creation not found")
    assert entry.category == "cuda_driver_arch"
    rc = triage_text("Memory type index for buffer creation not found\n").root_cause
    assert rc is not None and rc.category == "cuda_driver_arch"


_OLLAMA_START = (
    'time=2025-05-01T10:00:00.000Z level=INFO source=server.go:405 msg="starting llama server"\n'
)


def test_a_go_panic_is_an_error_line_and_its_value_is_read():
    # ollama's runner panics with ml/device.go@v0.32.15's ErrNoMem when the backend cannot
    # allocate; the Go runtime prints "panic: <value>" then the goroutines, with no log level
    log = (
        _OLLAMA_START
        + "panic: insufficient memory - required allocations: {InputWeights:1048576A}\n\n"
        "goroutine 1 [running]:\n"
        "github.com/ollama/ollama/runner/ollamarunner.(*Server).allocModel(0xc0001)\n"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and (rc.category, rc.basis, rc.line) == ("oom_weights", "engine-source", 2)


def test_a_go_panic_no_engine_message_explains_stays_other():
    log = (
        _OLLAMA_START
        + "panic: assignment to entry in nil map\n\ngoroutine 12 [running]:\n"
    )
    rc = triage_text(log).root_cause
    assert rc is not None and rc.category == "other" and rc.line == 2


# ------------------------------------------------------------------ wrappers and nodes


def test_a_message_that_appends_another_error_is_a_wrapper_in_c_and_go(harvest):
    # llama.cpp src/llama.cpp@0c1e57098 (llama_model_load): the load's wrapper quotes the
    # vocabulary loader's own error, which may be of any kind
    c = 'throw std::runtime_error("error loading model vocabulary: " + std::string(e.what()));'
    assert [t for _l, _k, t in harvest.c_templates(c)] == ["error loading model vocabulary: {}"]
    assert harvest.categorise("llama.cpp", "src/llama.cpp", "error loading model vocabulary: {}") is None
    go = 'return errors.New("failed to start runner: " + err.Error())'
    assert [t for _l, _k, t in harvest.go_templates(go)] == ["failed to start runner: {}"]
    # a plain literal is still itself
    assert [t for _l, _k, t in harvest.c_templates('throw std::runtime_error("x y z");')] == [
        "x y z"
    ]


def test_an_rpc_version_mismatch_is_the_nodes_not_the_device(harvest):
    # ggml-rpc.cpp@0c1e57098: the RPC server runs another build than the client
    rpc = "ggml/src/ggml-rpc/ggml-rpc.cpp"
    assert harvest.categorise("llama.cpp", rpc, "RPC server version mismatch: {}.{}.{}") == (
        "node_mismatch"
    )
    # the same backend's other refusals stay the device's
    assert (
        harvest.categorise("llama.cpp", rpc, "Null buffer for tensor passed to init_tensor function")
        == "cuda_driver_arch"
    )
