"""triage_file / triage_text: stream a log through the scanner, assembler and diagnosis."""

from __future__ import annotations

import contextlib
import io
import os
import stat
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from servepilot.errors import BadInput
from servepilot.triage import scan
from servepilot.triage.diagnosis import Diagnosis, decide
from servepilot.triage.events import Assembler
from servepilot.triage.markers import guess_engine
from servepilot.triage.parallel import scan_file_parallel, worker_count
from servepilot.triage.scan import ScanStats, needles_for, scan_lines
from servepilot.triage.signatures import ENGINES, Matcher, load_signatures

# Below this size every line is parsed (a few ms); above it the needle prefilter runs.
DENSE_FILE_BYTES = 4 << 20
_HEAD_BYTES = 1 << 20  # enough to see the engine's start-up banner
_TAIL_BYTES = 64 << 10  # the last lines, for where a log without errors stopped


def _check_engine(engine: str | None) -> str | None:
    if engine is None:
        return None
    from servepilot.engines.registry import find_engine

    record = find_engine(engine)
    if record is None:
        raise BadInput(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
    return record.name


# A log may carry a few garbled lines (a crashed writer, a binary blob echoed to the
# terminal); a file whose start is mostly not text is not a log at all.
_BINARY_SAMPLE = 64 << 10
_BINARY_SHARE = 0.30
_TEXT_CONTROLS = frozenset("\t\n\r\x1b\x08\x0c")


def binary_share(sample: bytes) -> float:
    """The share of characters in `sample` that are not text (invalid UTF-8 or control codes)."""
    if not sample:
        return 0.0
    text = sample.decode("utf-8", errors="replace")
    bad = sum(1 for ch in text if ch == "\ufffd" or (ch < " " and ch not in _TEXT_CONTROLS) or ch == "\x7f")
    return bad / len(text)


def _run(stream, size: int | None, engine: str | None, since: datetime | None, path: str | None = None,
         guess_sole_line: bool = False) -> Diagnosis:
    head = stream.read(_HEAD_BYTES)
    stream.seek(0)
    share = binary_share(head[:_BINARY_SAMPLE]) if path is not None else 0.0
    detected = engine or guess_engine(head)
    dense = size is None or size <= DENSE_FILE_BYTES
    needles = None if dense else needles_for(detected)
    asm = Assembler(since=since)
    scanned = None
    if path is not None and size is not None and not dense and worker_count(size) > 1:
        scanned = scan_file_parallel(path, size, needles, max(0, size - scan.DENSE_TAIL), worker_count(size))
    if scanned is not None:
        total_lines, candidates = scanned
        for line_no, line in candidates:
            asm.feed(line_no, line)
    else:
        stats = ScanStats()
        for line_no, line in scan_lines(stream, needles, stats):
            asm.feed(line_no, line)
        total_lines = stats.lines
    asm.finish()
    tail = _tail(stream, total_lines)
    diagnosis = decide(asm, Matcher(load_signatures(), engine), total_lines, detected, tail, guess_sole_line)
    if share > _BINARY_SHARE and diagnosis.root_cause is None and not diagnosis.healthy:
        # nothing a log would say was found in what is mostly not text: say so, not "no error"
        raise BadInput(f"not a text log: {share:.0%} of its first {min(len(head), _BINARY_SAMPLE):,} bytes are binary",
                       path=path, hint="pass the engine's stdout/stderr capture")
    return diagnosis


def _tail(stream, total_lines: int) -> list[tuple[int, str]]:
    """The last lines of the stream with their line numbers."""
    end = stream.seek(0, io.SEEK_END)
    start = max(0, end - _TAIL_BYTES)
    stream.seek(start)
    # split on "\n" only: a progress bar's "\r" redraws are one line in the file
    lines = stream.read(end - start).decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if start > 0 and lines:
        lines = lines[1:]  # a partial first line
    first = total_lines - len(lines) + 1
    return [(first + i, line) for i, line in enumerate(lines)]


def triage_file(path: str | os.PathLike, engine: str | None = None, since: datetime | None = None,
                guess_sole_line: bool = False) -> Diagnosis:
    """Diagnose a log file of any size, streaming it in chunks.

    `guess_sole_line`: the file is what a user handed over as the error (the `triage` verb), so
    a single line with no error marker is still named, as a guess (diagnosis.decide).

    `engine` (vllm | sglang | llama.cpp) limits the signatures; by default the engine is
    guessed from the log's first megabyte. `since`: lines stamped earlier belong to an older
    run; they are ignored and the diagnosis is marked stale.
    """
    engine = _check_engine(engine)
    p = Path(path)
    try:
        # a FIFO would block the open and cannot be re-read for the tail: refuse it up front
        if p.exists() and not p.is_dir() and not stat.S_ISREG(p.stat().st_mode):
            raise BadInput("not a regular file (save the log to a file first)", path=p)
        with p.open("rb") as f:
            st = os.fstat(f.fileno())
            if f.read(2) in _UTF16_BOMS:
                # PowerShell's `>` saves a log as UTF-16: scanned as its UTF-8 text (no path: the
                # parallel scanner and the binary test read the file's own bytes)
                with _utf16_as_utf8(f) as (text, size):
                    diagnosis = _run(text, size, engine, since, guess_sole_line=guess_sole_line)
                return _mark_untouched_since(diagnosis, st.st_mtime, since)
            f.seek(0)
            diagnosis = _run(f, st.st_size, engine, since, path=str(p), guess_sole_line=guess_sole_line)
            return _mark_untouched_since(diagnosis, st.st_mtime, since)
    except IsADirectoryError as exc:
        raise BadInput("is a directory, not a log file", path=p) from exc
    except OSError as exc:
        raise BadInput(f"cannot read log: {exc.strerror or exc}", path=p) from exc


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


@contextlib.contextmanager
def _utf16_as_utf8(f):
    """(stream, size) of a UTF-16 file's text as UTF-8, decoded in chunks (spooled to disk past
    64 MiB, so a big log is not held in memory twice)."""
    import codecs
    import tempfile

    decoder = codecs.getincrementaldecoder("utf-16")(errors="replace")  # the BOM says the order
    f.seek(0)
    with tempfile.SpooledTemporaryFile(max_size=64 << 20) as out:
        while chunk := f.read(1 << 20):
            out.write(decoder.decode(chunk).encode("utf-8"))
        out.write(decoder.decode(b"", final=True).encode("utf-8"))
        size = out.tell()
        out.seek(0)
        yield out, size


def decode_log_bytes(data: bytes) -> str:
    """A whole log's text as triage_file reads it: UTF-16 when it starts with a UTF-16 BOM, else
    UTF-8 with undecodable bytes replaced."""
    if data[:2] in _UTF16_BOMS:
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def _mark_untouched_since(diagnosis: Diagnosis, mtime: float, since: datetime | None) -> Diagnosis:
    """A log last written before the run began holds only older runs (the story's reused log)."""
    if since is None:
        return diagnosis
    start = since.timestamp() if since.tzinfo else since.astimezone().timestamp()
    if mtime >= start:
        return diagnosis
    written = datetime.fromtimestamp(mtime).strftime("%Y-%m-%d %H:%M:%S")
    reason = f"the log was last written at {written}, before the run began: it is an older run's log"
    joined = "; ".join(r for r in (reason, diagnosis.stale_reason) if r)
    return replace(diagnosis, stale=True, stale_reason=joined)


def triage_text(text: str, engine: str | None = None) -> Diagnosis:
    """Diagnose log text held in memory (an excerpt a user pasted: a lone line is still named)."""
    engine = _check_engine(engine)
    return _run(io.BytesIO(text.encode("utf-8", errors="replace")), None, engine, None, guess_sole_line=True)
