"""Device runtimes' status codes in an error message: what the runtime itself said happened.

Accelerator stacks report a failure by the status their runtime returned, as a name
(CUDA_ERROR_OUT_OF_MEMORY, hipErrorNoBinaryForGpu, UR_RESULT_ERROR_DEVICE_LOST, Vulkan-Hpp's
"vk::Queue::submit: ErrorDeviceLost", absl's "RESOURCE_EXHAUSTED: ...") or as a bare number in
a wrapper's own words (torch_memory_saver's "CUresult error result=2", torch_npu's "NPU function
error: ..., error code is 207018"). runtime_errors.yaml lists those names and numbers, read in
each runtime's header, with what each means in DESIGN.md's categories.

The vocabulary is the runtimes', not any one engine's: the next Ascend, XPU, TPU, ROCm or
Vulkan failure nobody here has seen still returns one of these statuses. Names are matched as
whole identifiers and case-sensitively (they are C identifiers); a number counts only in a
form that says whose status it is. diagnosis.py asks this module about an error no signature
knows (a signature's answer stays first); the data is loaded on the first such question.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

DATA_FILE = "runtime_errors.yaml"


@dataclass(frozen=True)
class RuntimeStatus:
    """One status a runtime returned, as a message shows it."""

    runtime: str  # "oneAPI Level Zero (ze_result_t)"
    name: str  # its name in the header ("ZE_RESULT_ERROR_DEVICE_LOST"), or "code N" when unnamed
    code: int | None  # None for a device bridge's interface (`bridges`), which has no code
    meaning: str  # a key of runtime_errors.yaml's `meanings`: out_of_memory, device_lost, ...
    category: str  # the DESIGN.md category that meaning is
    source: str  # header@version it was read in
    said: str  # the words of the message that carried it


class RuntimeDataError(ValueError):
    """runtime_errors.yaml is malformed (a packaging bug, caught by the test suite)."""


@dataclass(frozen=True)
class _Table:
    by_name: dict  # name or alias -> RuntimeStatus (said left empty)
    names: re.Pattern[str] | None
    numbers: tuple  # (compiled form, {code: RuntimeStatus}) per runtime that prints numbers
    texts: tuple  # (compiled form, {text lowercased: RuntimeStatus}) per runtime with `says`
    bridges: dict  # top-level module of a device bridge -> RuntimeStatus (said left empty)
    messages: tuple  # (compiled pattern, RuntimeStatus): a runtime front's own words, no code


def parse_runtime_table(data: dict) -> _Table:
    """The statuses of a runtime_errors.yaml document, validated."""
    from servepilot.categories import check_category

    try:
        meanings = {key: check_category(row["category"]) for key, row in data["meanings"].items()}
        by_name, numbers, texts = {}, [], []
        for runtime in data["runtimes"]:
            by_code, by_text = {}, {}
            for row in runtime["codes"]:
                meaning = row["meaning"]
                if meaning not in meanings:
                    raise RuntimeDataError(f"{row!r:.80}: unknown meaning {meaning!r}")
                code = int(row["code"])
                status = RuntimeStatus(
                    runtime=runtime["runtime"], name=row.get("name") or f"code {code}", code=code,
                    meaning=meaning, category=meanings[meaning], source=runtime["source"], said="",
                )
                by_code.setdefault(code, status)
                for name in [row.get("name"), *row.get("aliases", [])]:
                    if name:
                        by_name[name] = status
                for text in row.get("says", []):
                    by_text[text.lower()] = status
            if by_text:
                # the runtime's error string, only after a wrapper's words that say whose it is
                said = "|".join(re.escape(t) for t in sorted(by_text, key=len, reverse=True))
                after = runtime["says_after"]  # one regex, or a list of alternatives
                after = "|".join(after) if isinstance(after, list) else after
                form = rf"(?:{after})[^\n]{{0,200}}?(?P<text>{said})"
                texts.append((re.compile(form, re.IGNORECASE), by_text))
            for form in runtime.get("numbers", []):
                pattern = re.compile(form)
                if "code" not in pattern.groupindex:
                    raise RuntimeDataError(f"{form!r}: a number form needs a (?P<code>...) group")
                numbers.append((pattern, by_code))
        bridges = {}
        for row in data.get("bridges", []):
            bridges[row["module"]] = RuntimeStatus(
                runtime=f"PyTorch device bridge for {row['device']}", name=row["module"],
                code=None, meaning="device_stack_mismatch",
                category=meanings["device_stack_mismatch"], source=row["source"], said="",
            )
        messages = []
        for row in data.get("messages", []):
            meaning = row["meaning"]
            if meaning not in meanings:
                raise RuntimeDataError(f"{row!r:.80}: unknown meaning {meaning!r}")
            status = RuntimeStatus(
                runtime=row["source"].split("@")[0].split("/")[0], name=row["pattern"], code=None,
                meaning=meaning, category=meanings[meaning], source=row["source"], said="",
            )
            messages.append((re.compile(row["pattern"]), status))
    except (KeyError, TypeError, AttributeError, re.error) as exc:
        raise RuntimeDataError(f"{DATA_FILE}: {exc!r}") from exc
    except ValueError as exc:
        raise RuntimeDataError(f"{DATA_FILE}: {exc}") from exc
    names = None
    if by_name:
        # longest first, so that an alias inside a longer name never wins the alternation
        alternation = "|".join(re.escape(n) for n in sorted(by_name, key=len, reverse=True))
        names = re.compile(rf"(?<![A-Za-z0-9_])(?:{alternation})(?![A-Za-z0-9_])")
    return _Table(
        by_name=by_name, names=names, numbers=tuple(numbers), texts=tuple(texts), bridges=bridges,
        messages=tuple(messages),
    )


@functools.cache
def load_runtime_table() -> _Table:
    from servepilot.datafile import load_yaml_resource

    return parse_runtime_table(load_yaml_resource("servepilot.triage", DATA_FILE))


# Only this much of a message is searched: the status sits near the start of the runtime's
# line, and a 50 MB line must not be walked.
_MESSAGE_CHARS = 4000


# CPython's words for a module that lacks a name, a name it cannot import, a missing module
# (Objects/moduleobject.c, Python/import.c)
_INTERFACE = re.compile(
    r"module '(?P<attr>[\w.]+)' has no attribute|cannot import name '[^']+' from '(?P<name>[\w.]+)'"
    r"|No module named '(?P<module>[\w.]+)'"
)


def read_status(message: str, table: _Table | None = None) -> RuntimeStatus | None:
    """The first runtime status a message carries that the table gives a meaning, or None."""
    from dataclasses import replace

    table = table if table is not None else load_runtime_table()
    text = message[:_MESSAGE_CHARS]
    found = []
    if table.names is not None:
        for m in table.names.finditer(text):
            found.append((m.start(), replace(table.by_name[m.group(0)], said=m.group(0))))
            break
    for pattern, by_code in table.numbers:
        for m in pattern.finditer(text):
            status = by_code.get(int(m.group("code")))
            if status is not None:
                found.append((m.start(), replace(status, said=m.group(0))))
                break
    for pattern, by_text in table.texts:
        m = pattern.search(text)
        if m is not None:
            status = by_text[m.group("text").lower()]
            found.append((m.start("text"), replace(status, said=m.group(0))))
    for m in _INTERFACE.finditer(text):
        module = m.group("attr") or m.group("name") or m.group("module")
        status = table.bridges.get(module.split(".")[0])
        if status is not None:
            found.append((m.start(), replace(status, said=m.group(0))))
            break
    if found:
        return min(found, key=lambda f: f[0])[1]
    for pattern, status in table.messages:
        m = pattern.search(text)
        if m is not None:
            return replace(status, said=m.group(0))
    return None
