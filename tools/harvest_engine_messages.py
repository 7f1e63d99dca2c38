#!/usr/bin/env python3
"""Maintainers' tool: harvest the engines' own refusal messages from their sdists into triage data.

Run offline, by hand, over unpacked source trees given as paths (never in CI). The packaged
src/servepilot/triage/engine_messages.json was made from the PyPI sdists of vllm 0.5.5, 0.6.6,
0.8.5, 0.10.2, 0.11.0, 0.14.1, 0.19.0, 0.34.0, sglang 0.3.6, 0.4.1.post7, 0.4.5.post3,
0.4.10.post2, 0.5.5.post3, 0.5.9 (0.5.23: its wheel, the release has no sdist) and
llama-cpp-python 0.2.20, 0.2.56, 0.2.79, 0.2.90, 0.3.2, 0.3.9, 0.3.16, 0.3.25 and 0.3.36
(Nov 2023 to 2026; they vendor llama.cpp b38a16dfc, c2101a2e9, 9c77ec1d7, an unnamed commit
(0.2.90's CHANGELOG names none: its tag is llama-cpp-python-v0.2.90), 74d73dc85, 8733e0cf6,
4227c9be4, 210a6570c and 0c1e57098, as their CHANGELOGs say), each unpacked under S, and
ollama's Go sources at tags v0.1.20, v0.1.32, v0.3.0, v0.5.0, v0.6.0, v0.9.0, v0.12.0 and
v0.32.15 (`git archive TAG gpu discover llm runner llama/runner llama/llama.go ml fs/ggml kvcache
server/sched.go`
from github.com/ollama/ollama, unpacked under O/TAG):

    python tools/harvest_engine_messages.py \
        vllm=0.5.5=S/vllm-0.5.5 ... vllm=0.34.0=S/vllm-0.34.0 \
        sglang=0.3.6=S/sglang-0.3.6 ... sglang=0.5.23=S/sglang-0.5.23 \
        llama.cpp=0.3.2=S/llama_cpp_python-0.3.2/vendor/llama.cpp=74d73dc85 \
        llama.cpp=0.3.36=S/llama_cpp_python-0.3.36/vendor/llama.cpp=0c1e57098 \
        ollama=0.1.20=O/v0.1.20=v0.1.20 ... ollama=0.32.15=O/v0.32.15=v0.32.15 \
        --out src/servepilot/triage/engine_messages.json

(`pip download --no-deps --no-binary :all: vllm==V` fetches an sdist; vLLM's build step needs
torch, so where pip stops there, fetch the sdist file pip names.) Listing releases in
ascending order is not needed: ranges are computed from the versions.

Each SPEC is ENGINE=VERSION=PATH[=TAG]. PATH is the tree that holds the package (`vllm/`,
`sglang/`) or llama.cpp's `src/`, `ggml/`, `tools/`. TAG names the release in sources
(default `vVERSION`). llama.cpp has no PyPI release of its own: it is read from the copy that
llama-cpp-python vendors, so its VERSION is the llama-cpp-python release and TAG names the
llama.cpp commit that release vendors (llama-cpp-python's CHANGELOG says which).

What it reads: the modules named in MODULES below. What it takes from them: Python `raise
X(<message>)`, `assert ..., <message>` and `logger.error/critical/fatal/exception(<message>)`;
C/C++ `throw std::...(<message>)` (bare, through `format(...)` or `std::string(...)`),
LLAMA_LOG_ERROR, GGML_LOG_ERROR, LOG_ERR, SRV_ERR and GGML_ABORT; Go errors.New, fmt.Errorf,
slog.Error, log.Fatal, panic and Error() methods (ollama, filed under llama.cpp, which it wraps,
with "project": "ollama"). Each message becomes a
template (servepilot/triage/engine_source.py): literal text with `{}` where a value is
interpolated (f-string fields, `%s`-style and `.format` fields, concatenated expressions).
A template with too few literal words says nothing about a failure ("Unsupported dtype {}")
and is dropped (engine_source.is_evidence); so is one that two modules of different
categories both raise.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from servepilot.categories import check_category
from servepilot.triage.engine_source import is_evidence, literal_words, template_regex

# --------------------------------------------------------------------------- what means what
# Which modules are read, and the category of a refusal raised there. First match wins. A row
# whose category is None mixes kinds (a config module refuses lengths, sizes, dtypes, ...):
# its messages are sorted by KEYWORDS and dropped when no keyword family names them.
MODULES: list[tuple[str, str, str | None]] = [
    # Kernel code (Triton/CUDA ops, linear-attention kernels) checks its own arguments: a
    # failure there is an engine bug, not a refusal of the launch. Not read.
    ("vllm", r"/ops/|/kernels?/|/triton_ops/|/fla/", "skip"),
    ("sglang", r"/ops/|/kernels?/|/triton_ops/|/fla/|/triton_backend_ops/", "skip"),
    # vLLM
    ("vllm", r"vllm/model_executor/models/registry\.py$", "unsupported_arch"),  # the model registry
    ("vllm", r"vllm/model_executor/models/(?:interfaces|interfaces_base)\.py$", "unsupported_arch"),
    (
        "vllm",
        r"vllm/model_executor/model_loader/(?:utils|base_loader|default_loader|loader)\.py$",
        None,
    ),
    (
        "vllm",
        r"vllm/model_executor/model_loader/(?:bitsandbytes|gguf)_loader\.py$",
        "quantization_support",
    ),
    ("vllm", r"vllm/model_executor/layers/quantization/", "quantization_support"),  # quant methods
    (
        "vllm",
        r"vllm/attention/(?:selector|layer)\.py$|vllm/attention/backends/",
        "attention_backend",
    ),
    ("vllm", r"vllm/v1/attention/", "attention_backend"),
    ("vllm", r"vllm/platforms/", "cuda_driver_arch"),  # device checks: CUDA, ROCm, XPU, TPU, CPU
    # process groups and communicators; not the KV/EC/weight transfer connectors, expert
    # balancing or elastic EP, whose messages are about those features, not the ranks' links
    (
        "vllm",
        r"vllm/distributed/(?:parallel_state|utils|communication_op)\.py$",
        "nccl_distributed",
    ),
    ("vllm", r"vllm/distributed/device_communicators/(?!all2all|shm_object)", "nccl_distributed"),
    ("vllm", r"vllm/executor/ray_utils\.py$|vllm/v1/executor/ray_utils\.py$", "nccl_distributed"),
    ("vllm", r"vllm/transformers_utils/tokenizers?\b|vllm/tokenizers/", "tokenizer_template"),
    ("vllm", r"vllm/entrypoints/chat_utils\.py$", "tokenizer_template"),
    ("vllm", r"vllm/transformers_utils/config\.py$", None),  # config.json: arch, remote code, rope
    ("vllm", r"vllm/config\.py$|vllm/config/", None),  # engine config: every kind
    ("vllm", r"vllm/engine/arg_utils\.py$", None),
    ("vllm", r"vllm/worker/(?:worker|cache_engine|model_runner)\.py$", None),
    ("vllm", r"vllm/v1/core/kv_cache_utils\.py$", None),  # KV budget vs max_model_len
    ("vllm", r"vllm/v1/worker/gpu_(?:worker|model_runner)\.py$", None),
    # SGLang
    ("sglang", r"sglang/srt/models/registry\.py$", "unsupported_arch"),
    ("sglang", r"sglang/srt/layers/quantization/", "quantization_support"),
    ("sglang", r"sglang/srt/layers/attention/", "attention_backend"),
    # a device backend's own quantization and attention modules are those parts, not the device
    ("sglang", r"sglang/srt/hardware_backend/\w+/quantization/", "quantization_support"),
    ("sglang", r"sglang/srt/hardware_backend/\w+/attention/", "attention_backend"),
    ("sglang", r"sglang/srt/platforms/|sglang/srt/hardware_backend/", "cuda_driver_arch"),
    (
        "sglang",
        r"sglang/srt/distributed/(?:parallel_state|utils|communication_op)\.py$",
        "nccl_distributed",
    ),
    ("sglang", r"sglang/srt/distributed/device_communicators/", "nccl_distributed"),
    # the transfer engines prefill/decode disaggregation links its processes with (Ascend's
    # memfabric one): their start-up refusals are the links', as Mooncake's above are
    ("sglang", r"sglang/srt/disaggregation/\w+/transfer_engine\.py$", "nccl_distributed"),
    ("sglang", r"sglang/srt/model_executor/cuda_graph_runner\.py$", "cuda_graph"),
    ("sglang", r"sglang/srt/(?:utils/)?hf_transformers_utils\.py$", None),  # tokenizer and config
    ("sglang", r"sglang/srt/configs/model_config\.py$", None),
    ("sglang", r"sglang/srt/server_args\.py$", None),  # the asserts that refuse flag combinations
    ("sglang", r"sglang/srt/model_executor/model_runner\.py$", None),
    ("sglang", r"sglang/srt/model_loader/", None),
    ("sglang", r"sglang/srt/mem_cache/memory_pool\.py$", None),
    # llama.cpp (the tree llama-cpp-python vendors). Three layouts over the years: every file at
    # the root (llama.cpp, ggml-cuda.cu, ggml-metal.m, ... up to mid 2024), then ggml/src/ and
    # src/ with one big src/llama.cpp, then src/llama-*.cpp split by part (late 2024 on).
    ("llama.cpp", r"^(?:src/)?llama\.cpp$", None),  # the whole library in one file: mixed
    ("llama.cpp", r"^src/llama-(?:arch|model)\.cpp$", None),  # architecture tables and loading
    ("llama.cpp", r"^src/llama-model-loader\.cpp$", None),
    ("llama.cpp", r"^src/llama-(?:vocab|chat)\.cpp$", "tokenizer_template"),
    # the server's chat templates are set up here, and each request's messages and tool calls
    # parsed: mixed, so only the refusals that name the chat template (keywords) are kept
    ("llama.cpp", r"^common/chat\.cpp$", None),
    ("llama.cpp", r"^src/llama-(?:context|kv-cache|memory\w*)\.cpp$", None),
    # generated shaders and kernels, and the Kompute library vendored inside its backend
    ("llama.cpp", r"vulkan-shaders/|kompute-shaders/|/template-instances/|kompute/src/", "skip"),
    # the device backends: their start-up refusals are the device's or its driver's (an
    # allocation failure among them is sorted out by OVERRIDES below)
    (
        "llama.cpp",
        r"^(?:ggml/src/)?ggml-(?:cuda|vulkan|metal|sycl|cann|hip|musa|opencl|kompute|rpc|"
        r"webgpu|hexagon|zdnn|openvino|virtgpu)(?:/|\.(?:cu|cpp|c|m)$)",
        "cuda_driver_arch",
    ),
    # the CPU backend's device checks (instruction sets, AMX/KleidiAI tile set-up)
    ("llama.cpp", r"^ggml/src/ggml-cpu/(?:ggml-cpu\.c(?:pp)?|amx/|kleidiai/)", "cuda_driver_arch"),
    ("llama.cpp", r"^(?:ggml/src/)?ggml-backend(?:-reg)?\.c(?:pp)?$", None),
    # ggml-alloc.c is not read: its "failed to allocate {} buffer of size {}" is printed both by
    # the graph allocator (ggml_gallocr_reserve_n: compute buffers, sized by -c/-ub) and by the
    # tensor allocator (alloc_tensor_range: weights), so its words do not say which memory ran out
    ("llama.cpp", r"^tools/server/server(?:-http)?\.cpp$|^examples/server/server\.cpp$", None),
    # ollama (Go) wraps llama.cpp: its scheduler, runner launcher and GPU discovery refuse a
    # start-up in their own words. Read from ollama's tags; tests are not read.
    ("ollama", r"_test\.go$", "skip"),
    ("ollama", r"^(?:gpu|discover)/[^/]+\.go$", "cuda_driver_arch"),  # GPU discovery
    ("ollama", r"^llm/[^/]+\.go$", None),  # memory estimate, runner start, status
    ("ollama", r"^server/sched\.go$", None),
    ("ollama", r"^fs/ggml/[^/]+\.go$", None),  # its own GGUF reader: file types, quantizations
    ("ollama", r"^kvcache/[^/]+\.go$", None),  # its own KV cache (the Go engine's runner)
    ("ollama", r"^(?:runner|llama/runner)/(?:\w+/)?[^/]+\.go$", None),  # the runner process
    ("ollama", r"^llama/llama\.go$|^ml/(?:backend|device)\.go$|^ml/backend/ggml/ggml\.go$", None),
]

# Projects read as wrappers of an engine: their refusals are filed under that engine (a log of
# theirs is that engine's log), with the project named and its own releases as the range.
WRAPPED = {"ollama": "llama.cpp"}

# Keyword families for the mixed modules, narrowest first: (category, regex over the template).
# These sort refusals a module raises about different parts of a launch; they are not a guess
# about a log line, since the text they read is the engine's own template.
KEYWORDS: list[tuple[str, str]] = [
    ("remote_code", r"trust[_ ]remote[_ ]code"),
    (
        "kv_cache_dtype",
        r"kv[_ ]cache[_ ]dtype|kv cache dtype|fp8 kv|kv_cache_quant|quantized (?:kv|v) cache",
    ),
    (
        "max_model_len",
        r"max_model_len|max[_ ]seq[_ ]len|context length|context_length|max_position|"
        r"n_ctx_train|context size|rope[_ ]scaling",
    ),
    ("oom_kv_cache", r"cache blocks|kv cache|kv_cache|num_gpu_blocks|memory pool|token_to_kv_pool"),
    ("tp_divisibility", r"divisible|tensor[_ ]parallel[_ ]size|tp[_ ]size|must divide"),
    ("cuda_graph", r"cuda ?graph|cudagraph"),
    ("quantization_support", r"quantiz|\bquant\b|gptq|\bawq\b|fp8|bitsandbytes|\bgguf type|marlin"),
    (
        "attention_backend",
        r"attention backend|attention_backend|flashinfer|flash[_ ]?attn|"
        r"flash attention",
    ),
    ("tokenizer_template", r"tokeniz|chat template|chat_template|vocab"),
    (
        "unsupported_arch",
        r"architecture|model type|model_type|not supported model|unknown model|"
        r"(?:not|only) supported (?:for|by) (?:this|the following) model|"
        r"model .{0,40}does not support (?:lora|pipeline)|"
        # ollama's scheduler on a model its runner cannot load (server/sched.go@v0.12.0)
        r"(?:in|no longer )compatible with your version",
    ),
    (
        "cuda_driver_arch",
        r"compute capability|\bdriver\b|\bdevice\b|\bgpu\b|\bcuda\b|\brocm\b|"
        r"\bhip\b|backend .*not available",
    ),
    ("port_in_use", r"\bbind\b|address already in use|\bport\b"),
    (
        "oom_weights",
        r"out of memory|failed to allocate|unable to allocate|not enough memory|"
        r"insufficient memory|requires more (?:\w+ )?memory",
    ),
]

# Read in every module, before the module's own category: some refusals name their kind in
# words whatever module raises them. An attention backend or platform check refusing a KV
# cache dtype is a KV dtype problem (the dtype is what to change); a refusal naming the
# model's maximum length is about that length; memory for the KV cache (or for the pool SGLang
# sizes by --mem-fraction-static) is the KV side; a device backend that cannot allocate memory
# refuses for want of memory, not for a driver fault (ggml-cuda's "cudaMalloc failed"); a
# platform module that says "attention backend" is the backend selector.
OVERRIDES: list[tuple[str, str]] = [
    (
        "kv_cache_dtype",
        r"quantized (?:kv|v) cache|v cache quantization|kv[-_ ]cache[-_ ]dtype|"
        r"fp8\w* kv[-_ ]cache|fp8 kv\b",
    ),
    # a weight shard that does not split evenly: the tensor-parallel size is what to change
    (
        "tp_divisibility",
        r"(?:partition|output[_ ]size|input[_ ]size|shard)\w*.{0,60}(?:divisible|aligned)|"
        r"(?:divisible|aligned).{0,60}(?:partition|tensor[_ ]parallel|tp[_ ]size)",
    ),
    # the model's length set against the KV budget: the length is the setting to change
    ("max_model_len", r"max(?:imum)?[-_ ](?:model|seq)[-_ ]len"),
    # llama.cpp sizes its compute buffers by the context and micro-batch (-c, -ub): the KV side
    (
        "oom_kv_cache",
        r"failed to allocate compute (?:pp |tg )?buffers|"
        r"(?:allocate|memory)\b.{0,40}\b(?:kv[-_ ]cache|cache blocks)|"
        r"(?:kv[-_ ]cache|cache blocks)\b.{0,40}\b(?:allocate|memory)|"
        r"increase\W+(?:the\W+)?(?:--)?mem[-_]fraction[-_]static",
    ),
    (
        "oom_weights",
        r"out of memory|malloc failed|failed to allocate (?:\{\} )?(?:buffer|\{\} ?mib|memory)|"
        r"can't allocate|cannot allocate|not enough memory|free memory|"
        # ollama's words for the same want (llm/server.go, llama/llama.go, ml/device.go)
        r"unable to allocate|requires more (?:\w+ )?memory than|insufficient memory|"
        r"cannot be allocated|unable to load full model on|"
        # a device backend failing to allocate a sized buffer (ggml-rpc, ggml-cpu's HBM buffer,
        # Kompute, Metal's MTLBuffer, ggml-cuda's all-reduce staging, Hexagon's vmem limit)
        r"fail\w* to allocate \w+ (?:\w+ )?buffer|error allocating \w+ memory|"
        r"failed to create \w*buffer with size|alloc\b.{0,40}failed \(\{\} bytes\)|"
        r"exceeds max_vmem",
    ),
    ("attention_backend", r"(?:attention|selected) backend"),
    # the two ends of a multi-node link running different builds (ggml-rpc's server/client
    # protocol check): the nodes disagree, whatever module says so
    ("node_mismatch", r"\b(?:server|client|peer|remote|protocol) version mismatch\b"),
    # a platform or model refusing a quantization method: the method (or the checkpoint that
    # declares it) is what to change (not an attention backend's fused-output quantization)
    (
        "quantization_support",
        r"quantization (?:method )?(?:is )?(?:currently |yet )?not supported|"
        r"not supported for quantization|does not support .{0,30}quantization",
    ),
]
# overrides that do not apply in modules of these categories
OVERRIDE_EXCEPT = {"quantization_support": {"attention_backend"}}


# --------------------------------------------------------------------------- Python sources
_LOG_METHODS = {"error", "critical", "fatal", "exception"}
_LOGGERS = re.compile(r"^_?(?:logger|log|LOGGER)$")
_PERCENT_SPEC = re.compile(r"%%|%(?:\([^)]*\))?[-+ #0]*(?:\d+|\*)?(?:\.\d+)?[a-zA-Z]")
_FORMAT_FIELD = re.compile(r"\{\{|\}\}|\{[^{}]*\}")
_PLACEHOLDERS = re.compile(r"(?:\{\})+")


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _percent(text: str) -> str:
    """A %-format string to a template."""
    out, pos = [], 0
    for m in _PERCENT_SPEC.finditer(text):
        out.append(_escape(text[pos : m.start()]))
        out.append("%" if m.group(0) == "%%" else "{}")
        pos = m.end()
    out.append(_escape(text[pos:]))
    return "".join(out)


def _dot_format(text: str) -> str:
    """A str.format string to a template."""
    out, pos = [], 0
    for m in _FORMAT_FIELD.finditer(text):
        out.append(_escape(text[pos : m.start()]))
        out.append({"{{": "{{", "}}": "}}"}.get(m.group(0), "{}"))
        pos = m.end()
    out.append(_escape(text[pos:]))
    return "".join(out)


def expr_template(node: ast.expr, percent: bool = False) -> str:
    """The template of a message expression; `{}` wherever a value is computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _percent(node.value) if percent else _escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            _escape(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return expr_template(node.left, percent) + expr_template(node.right, percent)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            return _percent(node.left.value)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
    ):
        return _dot_format(node.func.value.value)
    return "{}"


def python_templates(source: str) -> list[tuple[int, str, str]]:
    """(line, kind, template) of every message raised, asserted or logged as an error in a module;
    kind is raise, assert or log."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        message, percent = None, False
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            message = node.exc.args[0]
        elif isinstance(node, ast.Assert) and node.msg is not None:
            message = node.msg
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _LOG_METHODS
            and isinstance(node.func.value, ast.Name)
            and _LOGGERS.match(node.func.value.id)
            and node.args
        ):
            message, percent = node.args[0], len(node.args) > 1
        if message is not None:
            kind = (
                "assert"
                if isinstance(node, ast.Assert)
                else "raise"
                if isinstance(node, ast.Raise)
                else "log"
            )
            found.append(
                (node.lineno, kind, _PLACEHOLDERS.sub("{}", expr_template(message, percent)))
            )
    return found


# --------------------------------------------------------------------------- C/C++ sources
_C_CALL = re.compile(
    r"\b(?:LLAMA_LOG_ERROR|GGML_LOG_ERROR|LOG_ERR|SRV_ERR|GGML_ABORT)\s*\("
    r"|\bthrow\s+std::\w+\s*\(\s*(?:(?:string_)?format\s*\(|std::string\s*\()?"
)
_C_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_C_MACRO = re.compile(r"[A-Za-z_]\w*")
_C_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}
_C_SPEC = re.compile(
    r"%%|%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L)?[diouxXeEfgGcspa]"
    r"|%[-+ #0]*(?:\d+|\*)?\s*$"
)


def _c_unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _C_ESCAPES.get(m.group(1), ""), text)


def c_templates(source: str) -> list[tuple[int, str, str]]:
    """(line, kind, template) of every error message thrown, logged as an error or aborted with;
    kind is raise (a throw), log or abort."""
    found = []
    for call in _C_CALL.finditer(source):
        pos, pieces = call.end(), []
        while True:  # the first argument: string literals, maybe split by format macros
            while pos < len(source) and source[pos] in " \t\r\n":
                pos += 1
            lit = _C_STRING.match(source, pos)
            if lit:
                pieces.append(_c_unescape(lit.group(1)))
                pos = lit.end()
                continue
            macro = _C_MACRO.match(source, pos)
            if (
                macro
                and pieces
                and pieces[-1].rstrip().endswith("%")
                or (macro and macro.group(0).startswith("PRI"))
            ):
                pieces.append("d")  # "%" PRId64 "..." : the macro finishes a format spec
                pos = macro.end()
                continue
            break
        if not pieces:
            continue
        if source.startswith("+", pos):
            # "error loading model vocabulary: " + std::string(e.what()): a value follows
            pieces.append("%s")
        text = "".join(pieces)
        out, last = [], 0
        for m in _C_SPEC.finditer(text):
            out.append(_escape(text[last : m.start()]))
            out.append("%" if m.group(0) == "%%" else "{}")
            last = m.end()
        out.append(_escape(text[last:]))
        template = _PLACEHOLDERS.sub("{}", "".join(out)).strip()
        head = call.group(0)
        kind = (
            "abort"
            if head.startswith("GGML_ABORT")
            else "raise"
            if head.startswith("throw")
            else "log"
        )
        found.append((source.count("\n", 0, call.start()) + 1, kind, template))
    return found


# --------------------------------------------------------------------------- Go sources
# ollama's errors: errors.New / fmt.Errorf values, slog.Error and log.Fatal messages, panics,
# and the text an error type's Error() method returns (ml's ErrNoMem).
_GO_CALL = re.compile(
    r"\b(?:errors\.New|fmt\.Errorf|slog\.Error|log\.Fatalf?|panic)\s*\(\s*(?:fmt\.Sprintf\s*\()?"
    r"|\bfunc\s*\([^)]*\)\s*Error\(\)\s*string\s*\{\s*return\s+(?:fmt\.Sprintf\s*\()?"
)
_GO_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"|`([^`]*)`')
_GO_SPEC = re.compile(r"%%|%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[vTtbcdoOqxXUeEfFgGspw]")


def go_templates(source: str) -> list[tuple[int, str, str]]:
    """(line, kind, template) of every error a Go file creates, logs at error level or panics
    with; kind is raise (an error value), log or abort (a panic or log.Fatal)."""
    found = []
    for call in _GO_CALL.finditer(source):
        pos, pieces = call.end(), []
        while True:  # the first argument: string literals joined by +
            start = pos
            while pos < len(source) and source[pos] in " \t\r\n+":
                pos += 1
            lit = _GO_STRING.match(source, pos)
            if not lit:
                if pieces and "+" in source[start:pos]:
                    pieces.append("%v")  # "..." + err.Error(): a value follows
                break
            raw = lit.group(2)
            pieces.append(raw if raw is not None else _c_unescape(lit.group(1)))
            pos = lit.end()
        if not pieces:
            continue
        text = "".join(pieces)
        out, last = [], 0
        for m in _GO_SPEC.finditer(text):
            out.append(_escape(text[last : m.start()]))
            out.append("%" if m.group(0) == "%%" else "{}")
            last = m.end()
        out.append(_escape(text[last:]))
        template = _PLACEHOLDERS.sub("{}", "".join(out)).strip()
        head = call.group(0)
        kind = "abort" if head.startswith(("panic", "log.")) else "log" if "slog" in head else "raise"
        found.append((source.count("\n", 0, call.start()) + 1, kind, template))
    return found


# --------------------------------------------------------------------------- categories
def module_category(engine: str, path: str) -> tuple[bool, str | None]:
    """(read it?, its category or None for a mixed module) for a module path in an sdist."""
    for row_engine, pattern, category in MODULES:
        if row_engine == engine and re.search(pattern, path):
            return category != "skip", None if category == "skip" else category
    return False, None


def keyword_category(template: str) -> str | None:
    text = " ".join(literal_words(template)).lower().replace("_", " ")
    raw = template.lower()
    for category, pattern in OVERRIDES + KEYWORDS:
        if re.search(pattern, raw) or re.search(pattern, text):
            return category
    return None


_TRAILING_VALUES = re.compile(r"(?:\s|\{\})+$")
_FAILED_CLAUSE = re.compile(
    r"(?:fail\w*|error|exception|could not|unable to)\b[^.!?:]*:$", re.IGNORECASE
)


def is_wrapper(template: str) -> bool:
    """A message that ends by quoting another error ("Capture cuda graph failed: {}"): what
    failed is the quoted error, which may be of any kind; the wrapper is not evidence of one.
    ("Unsupported model type: {}" quotes a name, not an error, and is kept.)"""
    stripped = _TRAILING_VALUES.sub("", template)
    return stripped != template.rstrip() and bool(_FAILED_CLAUSE.search(stripped))


def categorise(engine: str, path: str, template: str, kind: str = "raise") -> str | None:
    """The category a message of a module stands for, or None when it is no evidence.

    Asserts and aborts are read only where they are how a module refuses a configuration (the
    mixed modules: SGLang's server_args asserts are its flag checks); inside a kernel or backend
    module they guard the code's own invariants, and a log that shows one shows an engine bug.
    """
    read, category = module_category(engine, path)
    if not read or not is_evidence(template) or is_wrapper(template):
        return None
    if kind in ("assert", "abort") and category is not None:
        return None
    for override, pattern in OVERRIDES:
        if category in OVERRIDE_EXCEPT.get(override, ()):
            continue
        if re.search(pattern, template, re.IGNORECASE):
            return override
    return category if category is not None else keyword_category(template)


# --------------------------------------------------------------------------- harvesting
@dataclass
class Seen:
    engine: str
    template: str
    categories: set[str | None] = field(default_factory=set)
    versions: dict[Version, str] = field(default_factory=dict)  # version -> path@tag


@dataclass(frozen=True)
class Tree:
    engine: str
    version: Version
    root: Path
    tag: str


def parse_spec(spec: str) -> Tree:
    parts = spec.split("=")
    if len(parts) not in (3, 4):
        raise SystemExit(f"bad spec {spec!r}: expected ENGINE=VERSION=PATH[=TAG]")
    engine, version, root = parts[:3]
    tag = parts[3] if len(parts) == 4 else f"v{version}"
    path = Path(root)
    if not path.is_dir():
        raise SystemExit(f"{root}: not a directory")
    return Tree(engine, Version(version), path, tag)


def harvest_tree(tree: Tree, seen: dict[tuple[str, str], Seen]) -> int:
    count = 0
    for file in sorted(tree.root.rglob("*")):
        if (
            file.suffix not in (".py", ".cpp", ".cu", ".cuh", ".c", ".h", ".m", ".mm", ".go")
            or not file.is_file()
        ):
            continue
        rel = file.relative_to(tree.root).as_posix()
        if not module_category(tree.engine, rel)[0]:
            continue
        text = file.read_text(encoding="utf-8", errors="replace")
        pairs = (
            python_templates(text)
            if file.suffix == ".py"
            else go_templates(text)
            if file.suffix == ".go"
            else c_templates(text)
        )
        for _line, kind, template in pairs:
            if not is_evidence(template) or not template_regex(template):
                continue
            # a template a read module raises without a category (a mixed module's message no
            # keyword names) is kept as None: the same words raised elsewhere are then no
            # evidence of that other module's kind either
            category = categorise(tree.engine, rel, template, kind)
            entry = seen.setdefault((tree.engine, template), Seen(tree.engine, template))
            entry.categories.add(category)
            entry.versions.setdefault(tree.version, f"{rel}@{tree.tag}")
            count += 1
    return count


def version_range(found: list[Version], harvested: list[Version]) -> str:
    """From the first release harvested that holds it to before the first later one that does not
    (a template that left and came back is given its whole span)."""
    first, last = min(found), max(found)
    later = [v for v in harvested if v > last]
    return f">={first},<{min(later)}" if later else f">={first}"


def build(trees: list[Tree]) -> dict:
    seen: dict[tuple[str, str], Seen] = {}
    for tree in trees:
        n = harvest_tree(tree, seen)
        print(f"{tree.engine} {tree.version}: {n} messages", file=sys.stderr)
    harvested = defaultdict(list)
    for tree in trees:
        harvested[tree.engine].append(tree.version)
    entries = []
    for (engine, template), entry in sorted(seen.items()):
        if len(entry.categories) != 1 or None in entry.categories:
            continue  # raised by modules of different kinds: not evidence of either
        category = next(iter(entry.categories))
        check_category(category)
        newest = max(entry.versions)
        row = {
            "engine": WRAPPED.get(engine, engine),
            "category": category,
            "template": template,
            "source": entry.versions[newest],
            "versions": version_range(list(entry.versions), harvested[engine]),
        }
        if engine in WRAPPED:
            if (row["engine"], template) in seen:
                continue  # the engine's own entry already says it
            row["project"] = engine  # versions and source are the project's releases
        entries.append(row)
    return {
        "schema": "servepilot.engine-messages/1",
        "generated_by": "tools/harvest_engine_messages.py",
        "harvested": {
            engine: [
                next(t.tag for t in trees if t.engine == engine and t.version == v)
                for v in sorted(vs)
            ]
            for engine, vs in harvested.items()
        },
        "note": "versions: the releases harvested that hold the template (llama.cpp: the "
        "llama-cpp-python release that vendors it; source names the llama.cpp commit; an entry "
        "with a project (ollama) counts that project's releases and tags). A template missing "
        "from a release between two that hold it is given the whole span.",
        "entries": entries,
    }


def render(data: dict) -> str:
    """JSON with one entry a line: compact, and a new release's harvest diffs line by line."""
    head = {k: v for k, v in data.items() if k != "entries"}
    lines = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in data["entries"]]
    return (
        json.dumps(head, ensure_ascii=False)[:-1]
        + ', "entries": [\n'
        + ",\n".join(lines)
        + "\n]}\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", help="ENGINE=VERSION=PATH[=TAG]")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    data = build([parse_spec(s) for s in args.specs])
    args.out.write_text(render(data), encoding="utf-8")
    by = defaultdict(int)
    for e in data["entries"]:
        by[(e["engine"], e["category"])] += 1
    for key, n in sorted(by.items()):
        print(f"  {key[0]:10} {key[1]:22} {n}", file=sys.stderr)
    print(f"{len(data['entries'])} templates -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
