"""The chunked scanner: line numbers across chunk boundaries, windows, ranges on several cores."""

from __future__ import annotations

import io

from servepilot.triage import scan
from servepilot.triage.parallel import scan_file_parallel
from servepilot.triage.scan import ScanStats, needles_for, scan_lines


def _log() -> bytes:
    lines = []
    for i in range(4000):
        lines.append(f"(Worker_TP{i % 8} pid={100 + i % 8}) INFO 01-01 00:00:00 [x.py:1] step {i}")
        if i in (700, 2100, 3990):
            lines.append("(Worker_TP0 pid=100) ERROR 01-01 00:00:00 [x.py:1] Traceback (most recent call last):")
            lines.append(f'(Worker_TP0 pid=100) ERROR 01-01 00:00:00 [x.py:1]   File "/a.py", line {i}, in f')
            lines.append(f"(Worker_TP0 pid=100) ERROR 01-01 00:00:00 [x.py:1] ValueError: failure {i}")
        if i % 500 == 0:
            lines.append("Loading: 10%\rLoading: 60%\rLoading: 100%")
    return ("\n".join(lines) + "\n").encode()


def test_every_line_with_its_number_whatever_the_chunk_size():
    data = _log()
    expected = [(n, line.decode()) for n, line in enumerate(data.split(b"\n")[:-1], 1)]
    for chunk in (97, 4096, 1 << 20):
        stats = ScanStats()
        assert list(scan_lines(io.BytesIO(data), None, stats, chunk_bytes=chunk)) == expected
        assert stats.lines == len(expected)


def test_prefilter_yields_needle_lines_and_traceback_windows_with_true_numbers(monkeypatch):
    monkeypatch.setattr(scan, "DENSE_WINDOW", 400)
    data = _log()
    all_lines = data.split(b"\n")
    got = list(scan_lines(io.BytesIO(data), needles_for("vllm"), ScanStats(), chunk_bytes=1000, tail_from=len(data)))
    for n, text in got:
        assert all_lines[n - 1].decode() == text
    texts = [t for _, t in got]
    assert sum("ValueError" in t for t in texts) == 3
    # the frame line has no needle: only the window after "Traceback" brings it in
    assert sum('File "/a.py"' in t for t in texts) == 3
    assert len(got) < 200  # ordinary INFO lines stay out


def test_tail_is_parsed_line_by_line():
    data = _log()
    got = list(scan_lines(io.BytesIO(data), needles_for("vllm"), ScanStats(), tail_from=len(data) - 500))
    last_number = data.count(b"\n")
    assert got[-1][0] == last_number
    assert "step 3999" in got[-1][1]  # an INFO line, kept because it is in the tail


def test_ranges_on_several_processes_give_the_same_lines_as_one_stream(tmp_path):
    # ~300 KB in three ranges: the first traceback's 256 KB window crosses both range ends
    data = _log()
    log = tmp_path / "big.log"
    log.write_bytes(data)
    tail_from = len(data) - 300
    seq_stats = ScanStats()
    sequential = list(scan_lines(io.BytesIO(data), needles_for("vllm"), seq_stats, tail_from=tail_from))
    total, parallel = scan_file_parallel(str(log), len(data), needles_for("vllm"), tail_from, workers=3)
    assert total == data.count(b"\n") == seq_stats.lines
    assert parallel == sequential
    assert len(parallel) > 1000  # the window really spans the ranges


def test_triage_streams_the_file_itself_when_workers_cannot_start(tmp_path, monkeypatch):
    import servepilot.triage.api as api
    import servepilot.triage.parallel as parallel
    from servepilot.triage import triage_file

    def no_pool(*args, **kwargs):
        raise OSError("no semaphores here")

    data = _log()
    log = tmp_path / "big.log"
    log.write_bytes(data)
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_pool)
    monkeypatch.setattr(api, "DENSE_FILE_BYTES", 1)
    monkeypatch.setattr(api, "worker_count", lambda size: 2)
    assert parallel.scan_file_parallel(str(log), len(data), needles_for("vllm"), len(data), 2) is None
    d = triage_file(log)
    assert d.lines_read == data.count(b"\n")
    assert d.root_cause.exception == "ValueError" and d.root_cause.line == data.split(b"\n").index(
        b"(Worker_TP0 pid=100) ERROR 01-01 00:00:00 [x.py:1] ValueError: failure 700") + 1


def test_ollamas_readiness_line_is_seen_in_a_log_parsed_through_its_needles(tmp_path, monkeypatch):
    # a long-running ollama log: the runner's "started" line (its readiness) sits far from the
    # tail, so only a needle finds it; without it the client's cancelled request below reads as
    # the launch's failure
    import servepilot.triage.api as api
    from servepilot.triage import triage_file

    started = b'time=T level=INFO source=server.go:1269 msg="llama runner started in 63.59 seconds"\n'
    serving = b'[GIN] 2025/08/30 - 15:15:27 | 200 |   1.2s |   127.0.0.1 | POST     "/api/chat"\n' * 3000
    cancelled = (b'time=T level=ERROR source=server.go:1439 msg="post predict" error="Post '
                 b'\\"http://127.0.0.1:41243/completion\\": context canceled"\n')
    log = tmp_path / "ollama.log"
    log.write_bytes(b"load_tensors: loading model tensors\n" + started + serving + cancelled + serving)
    monkeypatch.setattr(api, "DENSE_FILE_BYTES", 1)  # parse through the needles, as over 4 MB
    d = triage_file(log)
    assert d.healthy and d.root_cause is None
