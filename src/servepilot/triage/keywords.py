"""A category for an error no signature knows, read from the words of its message.

Signatures (signatures.yaml) name exact engine messages; the long tail of messages they do
not know still usually says which part of a launch failed ("... attention backend ...",
"... tokenizer ..."). keywords.yaml lists one word family per DESIGN.md category, narrowest
first. frames.yaml does the same for the traceback's frames: where in the engine the error
was raised (a quantization module, an attention backend). The guess only labels an unknown
error: it never changes which error is the root cause, the error keeps `signature: null`
so a reader can tell a guess from a match, and its confidence stays low.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from servepilot.categories import check_category


@dataclass(frozen=True)
class KeywordFamily:
    category: str
    pattern: re.Pattern[str]
    why: str


class KeywordDataError(ValueError):
    """keywords.yaml is malformed (a packaging bug, caught by the test suite)."""


def parse_keyword_rows(rows: list) -> tuple[KeywordFamily, ...]:
    if not isinstance(rows, list):
        raise KeywordDataError("keywords.yaml must hold a list of families")
    families = []
    for row in rows:
        try:
            check_category(row["category"])
            families.append(KeywordFamily(row["category"], re.compile(row["pattern"], re.IGNORECASE), row["why"]))
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise KeywordDataError(f"keyword family {row!r:.80}: {exc}") from exc
    return tuple(families)


@functools.cache
def load_keyword_families() -> tuple[KeywordFamily, ...]:
    from servepilot.datafile import load_yaml_resource

    return parse_keyword_rows(load_yaml_resource("servepilot.triage", "keywords.yaml"))


# A quoted model id or file path is the user's name for a thing, not the engine's words about
# the failure: "Repo id must be in the form ...: '/models/Devstral-24B-AWQ-4bit'" is no
# quantization error, "Could not load library \"...-cuda-12-0/engine.dll\"" no CUDA one.
_QUOTED_NAME = re.compile(r"'[^'\s]*[/\\][^'\s]*'" + r'|"[^"\s]*[/\\][^"\s]*"')


# What a memory failure was allocating, when the words say it: the KV cache or a graph capture
# (the oom_* category a runtime's bare out-of-memory status becomes; runtime_status.py)
_MEMORY_PLACES = frozenset({"oom_kv_cache", "cuda_graph"})


def guess_category(message: str, families: tuple[KeywordFamily, ...] | None = None) -> tuple[str, str] | None:
    """(category, the words that decided it) for an unknown error message, or None.

    With the packaged families, a device runtime's own status in the message (runtime_status.py:
    a CUresult, hipError, ze/ur result, VkResult, absl or AscendCL code) decides first: it is the
    runtime's word for what happened, surer than any family's."""
    if families is None:
        by_status = status_category(message)
        if by_status is not None:
            return by_status
    message = _QUOTED_NAME.sub("'<name>'", message)
    for family in families if families is not None else load_keyword_families():
        m = family.pattern.search(message)
        if m:
            return family.category, m.group(0)
    return None


_FRAME_LINE = re.compile(r'File "[^"]+", line \d+')
# A frame running a module's top-level code: below a process's first frame it is an import
# in progress (Python runs a module's body when it is first imported).
_MODULE_BODY = re.compile(r'File "[^"]+", line \d+, in <module>')
# Messages of one installed package meeting another of a version it does not fit: a module
# or name the other does not have, an attribute its module lacks, a keyword its function
# does not take (CPython's wording: Python/import.c, Python/ceval.c, Objects/moduleobject.c,
# Python/getargs.c).
_INTERFACE_MISMATCH = re.compile(
    r"cannot import name |No module named |module '[\w.]+' has no attribute "
    r"|got an unexpected keyword argument "
    r"|missing \d+ required (?:positional|keyword-only) argument"
)
# A kernel compiled on first use (JIT) finding no CUDA toolkit: FlashInfer's "Could not find
# nvcc and default cuda_home='/usr/local/cuda' doesn't exist" (flashinfer/jit/cpp_ext.py
# get_cuda_path, as vLLM 0.23 logs show it), torch's "CUDA_HOME environment variable is not
# set" (torch/utils/cpp_extension.py). Whichever kernel came first to need the compiler (a
# sampler, an attention op, a GEMM) is not what is wrong; the install lacks the toolkit.
_TOOLKIT_MISSING = re.compile(
    r"could not find nvcc|CUDA_HOME environment variable is not set", re.IGNORECASE
)


# In those messages the quoted things are names (a function, a module, an argument), and a
# name is not the engine's words about what failed: "cannot import name
# 'top_k_top_p_sampling_from_probs' from 'flashinfer.sampling'" (or a module lacking an
# attribute) is a version mismatch, not an attention failure. A missing module ("No module
# named 'flash_attn'") keeps its name: which package is absent says which part cannot run.
_NAMES_ONLY = re.compile(
    r"cannot import name |module '[\w.]+' has no attribute |got an unexpected keyword argument "
)
_QUOTED = re.compile(r"'[^']*'|\(/[^)]*\)")


def words_of_mismatch(message: str) -> str:
    """The message without the names it quotes, when it reports packages that do not fit."""
    return _QUOTED.sub("'<name>'", message) if _NAMES_ONLY.search(message) else message


# "No module named 'a.b.c'": Python imports the parents first (importlib._bootstrap
# _find_and_load_unlocked), and a missing parent is named alone ("No module named 'a'"), so a
# dotted name says package `a` is installed, at a version without that submodule. When `a` is
# another project (a quantization or KV-transfer library), the words of its name are not the
# feature failing but the two installs not fitting each other. The engine's own packages keep
# their words: a vLLM build without its vendored kernels ('vllm.vllm_flash_attn...') lacks
# the part the name says, and 'transformers_modules' is no package but the namespace
# Transformers loads a model's remote code into (transformers/dynamic_module_utils.py).
_MISSING_SUBMODULE = re.compile(r"No module named '(?P<top>\w+)\.[\w.]+'")
_ENGINE_PACKAGES = frozenset({"vllm", "sglang", "llama_cpp", "sgl_kernel", "transformers_modules"})
# Kernel packages are the exception: whatever the reason one lacks a module, the attention
# backend or GPU path that imports it cannot run, and the way past it is the one its words
# say (another backend, a kernel build for this GPU), not only re-pinning the package.
_BUILT_PER_GPU = frozenset({"attention_backend", "cuda_driver_arch"})


def missing_submodule_of(message: str, category: str) -> str | None:
    """The installed third-party package whose missing dotted module the words `category`
    was guessed from do not name a failing feature of, or None."""
    m = _MISSING_SUBMODULE.search(message)
    if m is None or m.group("top") in _ENGINE_PACKAGES or category in _BUILT_PER_GPU:
        return None
    return m.group("top")


def raised_importing(lines: list[str], message: str) -> bool:
    """Whether an exception comes from packages that do not fit each other (an import that
    failed, a module's top-level code that failed, a keyword another package's version does
    not take), rather than from the part of the launch it passed through.

    Where such an error is raised says nothing about which part of the launch is wrong: a
    flashinfer that cannot be imported on Python 3.11 fails inside an all-reduce fusion's
    import, an LMCache module missing from the image inside vLLM's KV-transfer set-up. The
    install is what is wrong, so the frames lend no category (the words still may: a missing
    'vllm_flash_attn' module is the attention backend's). The same holds for an install that
    lacks the CUDA toolkit a JIT compile needs.
    """
    if _INTERFACE_MISMATCH.search(message) or _TOOLKIT_MISSING.search(message):
        return True
    frames = [line for line in lines if _FRAME_LINE.search(line)]
    return any(_MODULE_BODY.search(line) for line in frames[1:])


@functools.cache
def load_frame_families() -> tuple[KeywordFamily, ...]:
    from servepilot.datafile import load_yaml_resource

    rows = load_yaml_resource("servepilot.triage", "frames.yaml")
    if not isinstance(rows, list) or any(not isinstance(r, dict) or not r.get("source") for r in rows):
        raise KeywordDataError("frames.yaml: every family needs a source")
    return parse_keyword_rows([{k: r[k] for k in ("category", "pattern", "why") if k in r} for r in rows])


def guess_from_frames(lines: list[str], families: tuple[KeywordFamily, ...] | None = None) -> tuple[str, str] | None:
    """(category, the frame that decided it) from a traceback's frames, innermost first; or None."""
    families = families if families is not None else load_frame_families()
    for line in reversed(lines):
        if not _FRAME_LINE.search(line):
            continue
        for family in families:
            m = family.pattern.search(line)
            if m:
                return family.category, _FRAME_LINE.search(line).group(0)
    return None


# A C++/CUDA check names the source line that failed: vLLM's CUDACHECK prints "Failed: Cuda
# error %s:%d '%s'" with __FILE__ and __LINE__ (csrc/custom_all_reduce.cuh@v0.6.6), SGLang's
# kernels "CUDA error (<file>:<line>): ..." . That file is where the error was raised, as a
# traceback frame is for a Python exception. Triton's compiler names the Python source of the
# kernel it could not build in MLIR's form, loc("<file>.py":<line>:<column>).
_SOURCE_LOCATION = re.compile(
    r"[\w./\-]*\.(?:c|cc|cpp|cxx|cu|cuh|h|hpp)(?::|\()\d+" + r'|loc\("[^"]+\.py":\d+'
)


def guess_from_source(
    message: str, families: tuple[KeywordFamily, ...] | None = None
) -> tuple[str, str] | None:
    """(category, the source location that decided it) from a C++ location in a message."""
    families = families if families is not None else load_frame_families()
    for m in _SOURCE_LOCATION.finditer(message):
        for family in families:
            if family.pattern.search(m.group(0)):
                return family.category, m.group(0)
    return None


def status_category(message: str) -> tuple[str, str] | None:
    """(category, the status as printed) when a device runtime's status code in the message
    has a meaning (runtime_errors.yaml), else None. An out-of-memory status is the oom_*
    category the words name when they say what was being allocated (the KV cache, a graph
    capture); otherwise it is the weights', which the start-up phase may still move."""
    from servepilot.triage.runtime_status import read_status

    status = read_status(message)
    if status is None:
        return None
    if status.meaning == "out_of_memory":
        words = guess_category(message, load_keyword_families())
        if words is not None and words[0] in _MEMORY_PLACES:
            return words
    return status.category, status.said
