"""Start-up banners (one per launch), readiness lines, engine hints and start-up stages.

The engine-specific texts are owned by each engine's log module (engines/<engine>/logs.py:
BANNERS, READY, STAGES, LOG_HINT, with their sources), found through the engine registry;
this module joins them into the tables triage reads. A banner that appears a second time from
the same process name means a second launch wrote into the same log (the story's reused
/tmp/vllm_kimi.log). Lines every engine's server shares stay here:
  uvicorn "Application startup complete." / "Uvicorn running on %s"  uvicorn/lifespan/on.py,
          uvicorn/server.py (vLLM, SGLang and llama-cpp-python serve through uvicorn)
"""

from __future__ import annotations

import re

from servepilot.engines.registry import ENGINES


def _engine_logs():
    return [(record.name, record.logs) for record in ENGINES]


BANNERS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern)) for _, logs in _engine_logs() for kind, pattern, _source in logs.BANNERS
)

HEALTHY: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p) for _, logs in _engine_logs() for p in logs.READY
) + (
    re.compile(r"Application startup complete"),
    re.compile(r"Uvicorn running on"),
)

# A start-up that dies after its readiness line: SGLang serves first, then sends itself a
# warmup request and kills the server when that fails (logger.error("Initialization failed.
# warmup error: ...") then kill_process_tree; sglang/srt/entrypoints/http_server.py@v0.4.3
# _wait_and_warmup). Such a launch is not healthy, whatever it printed before.
ABORTED: tuple[str, ...] = ("Initialization failed. warmup error",)

# Process names that exist once per launch: a new pid under the same name is a new launch.
# Plain "VllmWorkerProcess" or "RayWorkerWrapper" names are shared by every worker of one
# launch, so they are left out.
_UNIQUE_NAME = re.compile(r"(?:_|\b)(?:TP|DP|PP|EP|PCP|DCP)\d+$|^APIServer$|^EngineCore(?:_DP\d+)?$")


# One search per line instead of one per pattern: every line of a log's parsed parts goes
# through these (the union is only a gate; the tables above still decide).
_ANY_BANNER = re.compile("|".join(f"(?:{p.pattern})" for _, p in BANNERS))
_ANY_HEALTHY = re.compile("|".join(f"(?:{p.pattern})" for p in HEALTHY))


def banner_kind(message: str) -> str | None:
    """The banner this message is, or None."""
    if not _ANY_BANNER.search(message):
        return None
    for kind, pattern in BANNERS:
        if pattern.search(message):
            return kind
    return None


def is_healthy(message: str) -> bool:
    """True for a line that says the server is up and serving."""
    return _ANY_HEALTHY.search(message) is not None


def is_unique_process_name(name: str) -> bool:
    return bool(_UNIQUE_NAME.search(name))


# Checked in each engine's LOG_HINT_ORDER: vLLM's words appear in the others' logs too.
ENGINE_HINTS: tuple[tuple[str, re.Pattern[bytes]], ...] = tuple(
    (name, re.compile(logs.LOG_HINT))
    for name, logs in sorted(_engine_logs(), key=lambda item: item[1].LOG_HINT_ORDER)
)


def guess_engine(head: bytes) -> str | None:
    """Which engine wrote a log, from its first bytes; None when nothing says."""
    for engine, pattern in ENGINE_HINTS:
        if pattern.search(head):
            return engine
    return None


# Where a log that ends with no error and no readiness line stopped. Only phases known to
# hang are listed: NCCL's bootstrap waits forever on a broken P2P path or unreachable peer
# (https://github.com/vllm-project/vllm/issues/5484), and CUDA graph capture can deadlock.
# Each row: (signature id, category, pattern over the message, explanation, source, remedies
# as (kind, change, tradeoff)).
STALL_PHASES: tuple[tuple, ...] = (
    (
        "log-ends-in-nccl-init",
        "nccl_distributed",
        re.compile(r"NCCL INFO|NCCL version|ncclCommInitRank|init_process_group|Initializing NCCL|pynccl"),
        "The log ends during NCCL initialisation with no error and no readiness line: if the "
        "engine is still running it hangs there (typically GPU peer-to-peer that never "
        "completes, or a peer it cannot reach). Try NCCL_P2P_DISABLE=1, or "
        "--disable-custom-all-reduce, and NCCL_DEBUG=INFO.",
        "https://github.com/vllm-project/vllm/issues/5484",
        (
            ("env", "NCCL_P2P_DISABLE=1", "collectives go through host memory: slower TP"),
            ("flag", "--disable-custom-all-reduce", "slightly slower small all-reduces"),
            ("env", "NCCL_DEBUG=INFO to see the last step NCCL reached", "none"),
        ),
    ),
    (
        "log-ends-in-cuda-graph-capture",
        "cuda_graph",
        # SGLang since 2025: "Capture target prefill CUDA graph begin", "Capturing batches (bs=...)",
        # "Capturing num tokens (num_tokens=...)" (https://github.com/sostrowsk/dgx-spark-local-llm
        # sglang-versuch1.log; https://github.com/sgl-project/sglang/pull/11275)
        # SGLang's "Capture <what> begin", whatever names the capture (engines/sglang/logs.py)
        re.compile(r"Capturing (?:CUDA graph|cudagraphs?)|CUDA graph capture"
                   r"|Capture [\w -]{0,60}?(?:[Gg]raph|CG)\b[\w -]{0,40}?\bbegin\b"
                   r"|Capturing (?:batches|num tokens) \("),
        "The log ends while CUDA graphs are being captured, with no error: if the engine is "
        "still running it hangs in capture. --enforce-eager (vLLM) or --disable-cuda-graph "
        "(SGLang) confirms it.",
        "vllm/v1/worker/gpu_model_runner.py@v0.10.0 (capture_model logs 'Capturing CUDA graphs')",
        (("flag", "--enforce-eager (vLLM) / --disable-cuda-graph (SGLang)", "no CUDA graphs: slower decoding"),),
    ),
)
STALL_WINDOW_LINES = 20  # the phase must be among the last 20 non-empty lines
# Stalls whose diagnosis rests on the line where the phase began, not on its last progress
# line: a capture hang is told by "capture began and nothing followed" (the progress bar's last
# tick says only how far it got); an NCCL stall keeps its last line, the last step NCCL reached.
STALL_POINTS_AT_START = frozenset({"log-ends-in-cuda-graph-capture"})


def stall_phase(tail_messages: list[str]):
    """The STALL_PHASES row of the last phase line among the final lines, or None."""
    recent = [m for m in tail_messages if m.strip()][-STALL_WINDOW_LINES:]
    for message in reversed(recent):
        if _PHASE_ENDED.search(message):
            return None  # the last phase it began, it also finished (an offline engine's log)
        for row in STALL_PHASES:
            if row[2].search(message):
                # a phase whose own progress bar reached its end finished there ("Capturing
                # batches (bs=1 avail_mem=14.64 GB): 100%|...", tqdm's last redraw)
                return None if _PROGRESS_DONE.search(message) else row
    return None


_PROGRESS_DONE = re.compile(r"(?<![\d.])100%\|")
# The engines' own words for a finished capture: SGLang's "Capture cuda graph end. Time
# elapsed: ..." (and "Capture piecewise CUDA graph end", sglang/srt/model_executor/
# model_runner.py@v0.4.5.post3, @v0.5.9), vLLM's "Graph capturing finished in %.0f secs"
# (vllm/worker/model_runner.py@v0.6.6, vllm/v1/worker/gpu_model_runner.py@v0.10.2).
# SGLang's ends read as its begins do ("Capture single-CG draft extend end.",
# speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py@v0.5.23).
_PHASE_ENDED = re.compile(
    r"Capture [\w -]{0,60}?(?:[Gg]raph|CG)\b[\w -]{0,40}?\bend\b|Graph capturing finished in"
)


# Start-up stages, from the engines' own progress lines (each engine's logs.STAGES), so that an
# error without telling frames (a bare "CUDA out of memory") can be placed: the same OOM is
# `cuda_graph` during graph capture and `oom_kv_cache` while the KV cache is profiled. Tested
# in this order, latest stage first; one pattern per stage joins every engine's texts.
STAGE_ORDER = ("after_cuda_graph_capture", "cuda_graph_capture", "kv_cache_profiling", "weights_loading")
PHASES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (stage, re.compile("|".join(p for _, logs in _engine_logs() for name, p, _source in logs.STAGES if name == stage)))
    for stage in STAGE_ORDER
)


_ANY_PHASE = re.compile("|".join(f"(?:{p.pattern})" for _, p in PHASES))


def phase_of(message: str) -> str | None:
    """The start-up phase this progress line announces, or None."""
    if not _ANY_PHASE.search(message):
        return None
    for name, pattern in PHASES:
        if pattern.search(message):
            return name
    return None


def is_aborted(message: str) -> bool:
    """True for a line that says a start-up which looked ready has failed after all."""
    return any(text in message for text in ABORTED)
