"""A log saved as UTF-16 (PowerShell's `>` redirect on Windows writes UTF-16LE with a BOM) is
decoded before it is scanned, so its lines read as they do in any other log."""

from __future__ import annotations

from pathlib import Path

import pytest

from servepilot.triage import triage_file
from servepilot.triage.api import decode_log_bytes

_CORPUS_LOG = (
    Path(__file__).resolve().parents[2]
    / "corpus"
    / "full-logs"
    / "kartikeya-vllm-wsl-utf16-no-kv.log"
)

# vLLM's KV budget refusal (vllm/v1/core/kv_cache_utils.py, as in the corpus log below)
_LOG = (
    "INFO 06-17 11:30:01 [core.py:70] Initializing a V1 LLM engine (v0.9.1)\r\n"
    "ERROR 06-17 11:30:47 [core.py:1195] ValueError: No available memory for the cache blocks. Try "
    "increasing `gpu_memory_utilization` when initializing the engine.\r\n"
)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_log_with_a_bom_is_read_as_text(tmp_path, encoding):
    bom = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff"}.get(
        encoding, b""
    )  # "utf-16" writes its own
    log = tmp_path / "vllm.log"
    log.write_bytes(bom + _LOG.encode(encoding))
    d = triage_file(log)
    assert d.root_cause is not None
    assert (d.root_cause.category, d.root_cause.line) == ("oom_kv_cache", 2)
    assert d.root_cause.message.startswith("ValueError: No available memory for the cache blocks")
    assert decode_log_bytes(log.read_bytes()) == _LOG


def test_the_corpus_powershell_log_is_diagnosed():
    # corpus row full-kartikeya-vllm-wsl-utf16-no-kv: the file as committed, byte for byte
    d = triage_file(_CORPUS_LOG)
    assert d.root_cause is not None and d.root_cause.category == "oom_kv_cache"
    assert "No available memory for the cache blocks" in d.root_cause.message


def test_a_utf8_log_is_not_taken_for_utf16():
    data = _LOG.encode("utf-8") + b"\xff\xfe stray bytes"
    assert decode_log_bytes(data).startswith("INFO 06-17")
