"""Where a process stopped from outside was waiting, read from the traceback of its stop.

A process stopped by a signal (Ctrl-C, a supervisor's or a timeout's SIGTERM) prints the stack
it was in when the signal came: vLLM turns SIGTERM into `KeyboardInterrupt("terminated")` in
its API server's signal handler (vllm/entrypoints/openai/api_server.py@v0.19.0 signal_handler),
so the innermost frame is the handler, and inside it the call that was blocked. When that call
was a read from the network (an HTTP request to the Hub, a socket to a peer), the frames around
it are plumbing (the standard library's I/O, the HTTP clients); the first frame outside them is
the engine's or a library's own call that waited on a service that did not answer, and that
call is what the launch hung on (a Hub request of transformers' tokenizer loader, as in
https://github.com/shiroyo-0/ai-agent-train/blob/e04d3b94b81bd5e0d12d39b033c6298ae4d07a3b/
vllm_server.log). A stop that came while the process computed, or waited on its own work (a
child process, a lock: vLLM inspecting a model class in a subprocess when a training script
stopped it, https://github.com/innocentbai/Reason4Rec-GRPO/blob/
2d762b5a75f304995be4731f3eac9d131a87ab2a/vllm_server.log), names no hang: the stop itself stays
the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from servepilot.triage.lines import parse_line

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]*)", line \d+, in (?P<func>\S+)')
# Frames that only carry a wait: the standard library's blocking I/O and synchronisation
# modules (not the rest of it: a stop inside typing.py or pickle is a stop while computing),
# the event loop, and the clients of the network and of other processes.
_PLUMBING = re.compile(
    r"/lib/python3\.\d+/(?:(?:ssl|socket|selectors|threading|queue|subprocess)\.py$"
    r"|(?:asyncio|concurrent|multiprocessing|http|urllib)/)|^uvloop/"
    r"|/(?:site|dist)-packages/(?:httpx|httpcore|h11|h2|urllib3|requests|aiohttp|anyio|"
    r"huggingface_hub|zmq|grpc|websockets|uvloop)/"
)
# Of those, the frames that wait on the network: a service outside the launch that may never
# answer (the standard library's ssl/socket/http, the HTTP and RPC clients, the Hub's client).
_NETWORK = re.compile(
    r"/lib/python3\.\d+/(?:(?:ssl|socket)\.py$|(?:http|urllib)/)"
    r"|/(?:site|dist)-packages/(?:httpx|httpcore|h11|h2|urllib3|requests|aiohttp|"
    r"huggingface_hub|grpc|websockets)/"
)
# The signal handler's own frame: named for the signal, or raising the stop.
_SIGNAL_FRAME = re.compile(r"signal", re.IGNORECASE)
_RAISES_STOP = re.compile(r"^\s*raise (?:KeyboardInterrupt|SystemExit)\b|^\s*sys\.exit\(")


@dataclass(frozen=True)
class Wait:
    line: int  # the frame's line in the log
    frame: str  # the frame line as printed
    code: str  # its code line, when printed
    function: str


def where_it_waited(stack: list[tuple[int, str]]) -> Wait | None:
    """The frame of the call a stopped process was blocked in, or None (see the module).

    `stack`: the stop's traceback lines as (line number, text), outermost frame first.
    """
    numbers = [n for n, _ in stack]
    lines = [text for _, text in stack]
    frames = []  # (index, path, function) innermost last
    for i, text in enumerate(lines):
        m = _FRAME.match(parse_line(text).message)
        if m:
            frames.append((i, m.group("path"), m.group("func")))
    waited_in_plumbing = on_the_network = False
    for n, (i, path, func) in enumerate(reversed(frames)):
        code = _code_after(lines, i)
        if n == 0 and (_SIGNAL_FRAME.search(func) or _RAISES_STOP.match(code)):
            continue  # the handler that turned the signal into the stop
        if _PLUMBING.search(path):
            waited_in_plumbing = True
            on_the_network = on_the_network or _NETWORK.search(path) is not None
            continue
        if not (waited_in_plumbing and on_the_network):
            return None  # it was computing, or waiting on its own work: no hang to name
        return Wait(numbers[i], parse_line(lines[i]).text, code, func)
    return None


def _code_after(lines: list[str], i: int) -> str:
    """The code line printed under frame `i`, or ''."""
    if i + 1 < len(lines):
        message = parse_line(lines[i + 1]).message
        if not _FRAME.match(message):
            return message
    return ""
