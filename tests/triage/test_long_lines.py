"""Hostile shapes of a log (issue 17): one endless line, a thousand launches in one file."""

from __future__ import annotations

import io
import json

from servepilot.cli.main import main
from servepilot.triage import triage_file, triage_text
from servepilot.triage.scan import ScanStats, scan_lines

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


def _one_line(path, filler: str, size: int) -> None:
    with path.open("w") as f:
        half = filler * (size // len(filler) // 2)
        f.write(half + " " + OOM + " " + half)  # no newline anywhere


def test_an_error_inside_one_endless_line_is_found_and_the_answer_stays_small(tmp_path, capsys):
    log = tmp_path / "one.log"
    # every word says "Error", so only the strongest window finds the OOM in the middle
    _one_line(log, "Error word Error word\t", 6 << 20)
    d = triage_file(log)
    assert d.lines_read == 1
    assert d.root_cause is not None and "out of memory" in d.root_cause.message
    assert main(["triage", "--json", str(log)]) == 1
    out = capsys.readouterr().out
    assert len(out.encode()) < 64 << 10
    assert json.loads(out)["lines_read"] == 1


def test_a_progress_bar_captured_without_newlines_is_one_line_and_its_error_a_window(tmp_path):
    log = tmp_path / "bar.log"
    _one_line(log, "Loading safetensors checkpoint shards: 50% Completed | 5/10\r", 3 << 20)
    d = triage_file(log)
    assert d.lines_read == 1
    assert d.root_cause is not None and d.root_cause.message.startswith("torch.OutOfMemoryError")
    assert len(d.root_cause.excerpt) < 4000


def test_line_count_of_files_with_and_without_a_final_newline():
    for data, lines in ((b"x", 1), (b"x\n", 1), (b"x\ny", 2), (b"a" * (3 << 20), 1), (b"a" * (3 << 20) + b"\nb\n", 2)):
        stats = ScanStats()
        list(scan_lines(io.BytesIO(data), (b"rror",), stats, chunk_bytes=1 << 20))
        assert stats.lines == lines, data[:10]


def test_a_thousand_launches_are_named_in_a_short_clause():
    banner = "(APIServer pid={pid}) INFO 12-29 15:00:00 [api_server.py:1] vLLM API server version 0.16.0\n"
    text = "".join(banner.format(pid=i) for i in range(1000)) + f"(APIServer pid=999) {OOM}\n"
    d = triage_text(text)
    assert d.launches == 1000
    assert d.stale and len(d.stale_reason) < 1500
    assert "more" in d.stale_reason and "line 1000" in d.stale_reason
