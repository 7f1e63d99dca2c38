"""The engine-source tier: templates harvested from the engines' sdists name what an error is
when no signature knows it (triage/engine_source.py, tools/harvest_engine_messages.py).

Generator tests run the harvester's own functions on small inline sources. Tier tests use
lines printed from templates that are in the packaged data file (each case names the entry's
source file@version); the values filled into a template's `{}` are made up, its words are not.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from servepilot.categories import check_category
from servepilot.datafile import resource_path
from servepilot.engines.registry import ENGINE_NAMES
from servepilot.triage import triage_text
from servepilot.triage.engine_source import (
    load_messages,
    match_engine_message,
    parse_messages,
    template_head,
    template_parts,
    template_regex,
)
from servepilot.triage.signatures import Matcher, load_signatures

_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "harvest_engine_messages.py"


@pytest.fixture(scope="module")
def harvest():
    spec = importlib.util.spec_from_file_location("harvest_engine_messages", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


# ------------------------------------------------------------------ template -> regex


def test_template_regex_escapes_literals_and_makes_values_lazy_wildcards():
    regex = template_regex("Model architectures {} are not supported for now (see {}).")
    assert (
        regex == r"Model\s+architectures(?>.*?are\s+not\s+supported\s+for\s+now\s+\(see)(?>.*?\)\.)"
    )
    pattern = re.compile(regex)
    assert pattern.search(
        "ValueError: Model architectures ['FooForCausalLM'] are not supported for now (see docs)."
    )
    assert not pattern.search("Model architectures ['Foo'] are supported for now (see docs).")


def test_doubled_braces_are_literal_and_outer_values_are_dropped():
    assert template_parts("{}: dict {{a}} got {}") == ["", ": dict {a} got ", ""]
    assert template_regex("{}: dict {{a}} got {}") == r":\s+dict\s+\{a\}\s+got"


def test_a_templates_first_sentence_stands_for_it_when_the_paste_is_cut():
    template = "Model architectures {} are not supported for now. Supported architectures: {}"
    assert template_head(template) == "Model architectures {} are not supported for now."
    assert template_head("Unsupported dtype {}. Use another.") is None  # too few words alone
    assert (
        template_head("Model architectures {} are not supported for now.") is None
    )  # nothing follows
    # vllm/model_executor/models/registry.py@v0.34.0, the line as a reporter pasted it
    found = match_engine_message(
        "ValueError: Model architectures ['EagleFooForCausalLM'] are not supported for now."
    )
    assert found is not None and found.template == template and found.category == "unsupported_arch"


def test_python_messages_become_templates(harvest):
    source = """
def f(x, n):
    raise ValueError(f"Quantization method {x} is not supported on this GPU (cc {n}).")
    raise RuntimeError("Cannot load %s with %d shards" % (x, n))
    raise TypeError("Bad {} value for {name}".format(x, name=n))
    raise NotImplementedError("Pipeline parallelism " + x + " is not supported here")
    logger.error("Failed to import kernel library %s for model %s", x, n)
    assert n > 0, f"tensor parallel size {n} must divide the heads"
    raise ValueError(msg)
"""
    found = [(kind, t) for _, kind, t in harvest.python_templates(source)]
    assert ("raise", "Quantization method {} is not supported on this GPU (cc {}).") in found
    assert ("raise", "Cannot load {} with {} shards") in found
    assert ("raise", "Bad {} value for {}") in found
    assert ("raise", "Pipeline parallelism {} is not supported here") in found
    assert ("log", "Failed to import kernel library {} for model {}") in found
    assert ("assert", "tensor parallel size {} must divide the heads") in found
    assert ("raise", "{}") in found  # a message held in a variable: nothing literal to match


def test_c_messages_become_templates(harvest):
    source = r"""
    throw std::runtime_error(format("unknown model architecture: '%s'", name.c_str()));
    LLAMA_LOG_ERROR("%s: failed to allocate %" PRId64 " bytes for the KV cache\n", __func__, n);
    GGML_ABORT("fatal error: device %d is not supported");
    throw std::invalid_argument("split mode " "tensor needs flash attention");
"""
    found = [(kind, t) for _, kind, t in harvest.c_templates(source)]
    assert found == [
        ("raise", "unknown model architecture: '{}'"),
        ("log", "{}: failed to allocate {} bytes for the KV cache"),
        ("abort", "fatal error: device {} is not supported"),
        ("raise", "split mode tensor needs flash attention"),
    ]


# ------------------------------------------------------------------ module -> category


@pytest.mark.parametrize(
    "engine, path, template, category",
    [
        (
            "vllm",
            "vllm/model_executor/models/registry.py",
            "Model architectures {} are not supported for now.",
            "unsupported_arch",
        ),
        (
            "vllm",
            "vllm/model_executor/layers/quantization/awq.py",
            "Marlin does not support this weight group size",
            "quantization_support",
        ),
        (
            "vllm",
            "vllm/platforms/rocm.py",
            "GCN arch {} has too few digits to derive a capability",
            "cuda_driver_arch",
        ),
        # a mixed module: sorted by keywords
        (
            "vllm",
            "vllm/config/model.py",
            "Pipeline parallelism is not supported for this model.",
            "unsupported_arch",
        ),
        (
            "vllm",
            "vllm/config/model.py",
            "User-specified max_model_len ({}) is greater than the derived length",
            "max_model_len",
        ),
        # overrides in any module: a device backend's allocation failure is memory, not a
        # driver fault
        (
            "llama.cpp",
            "ggml/src/ggml-metal/ggml-metal-device.m",
            "{}: error: failed to allocate buffer, size = {} MiB",
            "oom_weights",
        ),
        (
            "vllm",
            "vllm/v1/attention/backends/mla/triton_mla.py",
            "TritonMLA V1 with FP8 KV cache not yet supported",
            "kv_cache_dtype",
        ),
        # a platform refusing a quantization method; a device backend's own quantization module
        (
            "vllm",
            "vllm/platforms/interface.py",
            "{} quantization is currently not supported in {}.",
            "quantization_support",
        ),
        (
            "sglang",
            "sglang/srt/hardware_backend/gpu/quantization/gptq_kernels.py",
            "GPTQ CUDA kernels are unavailable on the current platform.",
            "quantization_support",
        ),
        # but an attention backend's fused-output quantization stays the backend's
        (
            "vllm",
            "vllm/v1/attention/backends/triton_attn.py",
            "fused output quantization is not supported for TritonAttentionImpl",
            "attention_backend",
        ),
        # a quantized weight shard that does not split evenly: the TP size is what to change
        (
            "vllm",
            "vllm/model_executor/layers/quantization/utils/marlin_utils.py",
            "Weight input_size_per_partition = {} is not divisible by min_thread_k = {}.",
            "tp_divisibility",
        ),
    ],
)
def test_module_and_keywords_decide_the_category(harvest, engine, path, template, category):
    assert harvest.categorise(engine, path, template) == category


def test_what_is_not_evidence_gets_no_category(harvest):
    # too few words of its own, or only Python's words around values
    assert harvest.categorise("vllm", "vllm/platforms/cuda.py", "Unsupported dtype {}") is None
    assert (
        harvest.categorise("vllm", "vllm/platforms/cuda.py", "module {} has no attribute {}")
        is None
    )
    # a module not in the table, a kernel's own argument check, an invariant assert in a backend
    assert (
        harvest.categorise(
            "vllm", "vllm/sampling_params.py", "temperature must be non-negative, got {}"
        )
        is None
    )
    assert (
        harvest.categorise(
            "vllm",
            "vllm/v1/attention/ops/paged.py",
            "query heads must be divisible by the key heads here",
        )
        is None
    )
    assert (
        harvest.categorise(
            "vllm",
            "vllm/model_executor/layers/quantization/fp8.py",
            "weight scales have the wrong shape for this layer",
            kind="assert",
        )
        is None
    )
    # a mixed module's message no keyword names
    assert (
        harvest.categorise(
            "vllm", "vllm/config/model.py", "Seed must be set before the engine starts"
        )
        is None
    )
    # a wrapper that quotes another error: the quoted error says what failed, not the wrapper
    assert (
        harvest.categorise(
            "sglang",
            "sglang/srt/model_executor/cuda_graph_runner.py",
            "Capture cuda graph failed: {}\n{}",
        )
        is None
    )
    assert (
        harvest.categorise(
            "llama.cpp",
            "ggml/src/ggml-cuda/ggml-cuda.cu",
            "{}: allocating {} MiB on device {}: cudaMalloc failed: {}",
        )
        is None
    )
    assert (
        harvest.categorise(
            "vllm",
            "vllm/model_executor/models/registry.py",
            "Model architectures {} are not supported for now. Supported architectures: {}",
        )
        == "unsupported_arch"
    )


def test_harvest_of_two_releases_gives_ranges_and_drops_ambiguous_templates(harvest, tmp_path):
    def tree(version: str, files: dict[str, str]) -> object:
        root = tmp_path / version
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return harvest.parse_spec(f"vllm={version}={root}")

    registry = (
        'raise ValueError(f"Model architectures {a} are not supported for now by this build")\n'
    )
    shared = 'raise ValueError(f"Quantization scheme {a} has no kernel for this device at all")\n'
    old = tree(
        "0.5.5",
        {
            "vllm/model_executor/models/registry.py": registry,
            "vllm/model_executor/layers/quantization/gptq.py": shared,
            "vllm/platforms/cuda.py": shared,  # the same words in a module of another kind
        },
    )
    new = tree("0.8.5", {"vllm/model_executor/models/registry.py": registry})
    newest = tree("0.10.2", {"vllm/model_executor/models/registry.py": "pass\n"})
    data = harvest.build([old, new, newest])
    assert data["entries"] == [
        {
            "engine": "vllm",
            "category": "unsupported_arch",
            "template": "Model architectures {} are not supported for now by this build",
            "source": "vllm/model_executor/models/registry.py@v0.8.5",
            "versions": ">=0.5.5,<0.10.2",
        }
    ]
    out = json.loads(harvest.render(data))
    assert parse_messages(out)[0].versions == ">=0.5.5,<0.10.2"


# ------------------------------------------------------------------ the packaged data


def test_every_packaged_entry_has_a_source_a_range_and_words_of_its_own(harvest):
    data = json.loads(
        resource_path("servepilot.triage", "engine_messages.json").read_text(encoding="utf-8")
    )
    assert len(data["entries"]) > 1000
    for row in data["entries"]:
        assert row["engine"] in ENGINE_NAMES
        check_category(row["category"])
        assert row["category"] != "other"
        path, _, tag = row["source"].rpartition("@")
        assert path and tag, row
        SpecifierSet(row["versions"])
        assert harvest.is_evidence(row["template"]), row


# ------------------------------------------------------------------ the tier in triage


def _entry(template: str):
    found = [m for m in load_messages() if m.template == template]
    assert found, f"not in engine_messages.json: {template!r}"
    return found[0]


# (line printed from a packaged template, its template, category)
TIER_CASES = [
    # vllm/config/model.py@v0.34.0 (ModelConfig.verify_with_parallel_config)
    (
        "NotImplementedError: Pipeline parallelism is not supported for this model. "
        "Supported models implement the `SupportsPP` interface.",
        "Pipeline parallelism is not supported for this model. "
        "Supported models implement the `SupportsPP` interface.",
        "unsupported_arch",
    ),
    # sglang/srt/layers/quantization/modelopt_quant.py (ModelOptFp8Config.from_config)
    (
        "ValueError: ModelOptFp8Config only supports static FP8 quantization in SGLang. "
        "For FP4 quantization, use ModelOptFp4Config. "
        "Check the quantization config for your model's configuration.",
        "ModelOptFp8Config only supports static FP8 quantization in SGLang. "
        "For FP4 quantization, use ModelOptFp4Config. "
        "Check the quantization config for your model's configuration.",
        "quantization_support",
    ),
    # vllm/platforms/cpu.py@v0.34.0 (a platform's own check)
    (
        "RuntimeError: vLLM on x86 CPUs requires Triton (triton-cpu).",
        "vLLM on x86 CPUs requires Triton (triton-cpu).",
        "cuda_driver_arch",
    ),
]


@pytest.mark.parametrize("line, template, category", TIER_CASES, ids=[c[2] for c in TIER_CASES])
def test_an_engine_refusal_no_signature_knows_is_named_by_its_source(line, template, category):
    entry = _entry(template)
    message = line.split(": ", 1)[1]
    assert (
        Matcher(load_signatures()).match(line) is None
        and Matcher(load_signatures()).match(message) is None
    )
    log = (
        "INFO 01-01 00:00:01 [core.py:70] Initializing a V1 LLM engine\n"
        "Traceback (most recent call last):\n"
        '  File "/app/start.py", line 12, in <module>\n'
        "    main()\n"
        f"{line}\n"
    )
    d = triage_text(log)
    rc = d.root_cause
    assert rc is not None and rc.signature is None
    assert (rc.category, rc.basis) == (category, "engine-source")
    assert entry.source in rc.explanation and entry.versions in rc.explanation
    assert 0.45 < rc.confidence < 0.9


def test_a_pasted_engine_sentence_is_named_by_its_source():
    # vllm/v1/attention/backends/flex_attention.py@v0.10.2: a sentence pasted alone, no marker
    entry = _entry("FlexAttention does not support sliding window yet.")
    d = triage_text("FlexAttention does not support sliding window yet.")
    assert (
        d.root_cause is not None and d.root_cause.category == entry.category == "attention_backend"
    )
    assert entry.source in d.root_cause.explanation


def test_a_curated_signature_still_wins():
    # vllm/model_executor/models/registry.py: harvested, and known to signatures.yaml too
    line = (
        "ValueError: Model architectures ['FooForCausalLM'] are not supported for now. "
        "Supported architectures: []"
    )
    assert match_engine_message(line) is not None
    d = triage_text(line)
    assert d.root_cause.signature is not None and d.root_cause.basis == "signature"


def test_an_unknown_error_that_no_engine_prints_stays_other():
    d = triage_text("Traceback (most recent call last):\nZeroDivisionError: division by zero\n")
    assert d.root_cause is not None and d.root_cause.category == "other"
    assert match_engine_message("ZeroDivisionError: division by zero") is None


def test_the_data_is_not_loaded_until_an_unknown_error_needs_it():
    code = (
        "import servepilot.cli, servepilot.triage.api, servepilot.triage.engine_source as e\n"
        "from servepilot.triage import triage_text\n"
        "triage_text('INFO all good\\nApplication startup complete.\\n')\n"
        "print(e.load_messages.cache_info().currsize)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_a_line_that_repeats_a_templates_pieces_without_its_end_is_answered():
    # Every piece of the template but its last, forty times over: lazy wildcards that backtrack
    # would try each combination of places (seconds per line); the atomic ones take the first.
    template = "Backend {} already exists in {}. Use register_backend({}.{}, '{}') to override."
    entry = next((m for m in load_messages() if m.template == template), None)
    messages = (
        (entry,)
        if entry is not None
        else parse_messages(
            {
                "entries": [
                    {
                        "engine": "sglang",
                        "category": "attention_backend",
                        "template": template,
                        "source": "x.py@v1",
                        "versions": ">=1",
                    }
                ]
            }
        )
    )
    pieces = [p.strip() for p in template_parts(template) if p.strip()]
    line = ((" ".join(pieces[:-1]) + " ") * 40)[:2000]
    assert "(?>" in messages[0].pattern.pattern
    assert match_engine_message(line, messages=messages) is None
    assert (
        match_engine_message(line + " " + pieces[-1], messages=messages) is None
    )  # beyond the searched part
    short = " ".join(pieces)
    assert match_engine_message(short, messages=messages) is messages[0]
