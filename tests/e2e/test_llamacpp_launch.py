"""servepilot launch against a real engine: llama-cpp-python's OpenAI-compatible server."""

import json
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from patience import PATIENCE_S

from servepilot.categories import CATEGORIES
from servepilot.runs.process import group_members

from .conftest import llama_server_argv, requires_llama_cpp, servepilot

pytestmark = [pytest.mark.e2e, requires_llama_cpp]


def _json(result) -> dict:
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def _no_orphans(payload) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while group_members(payload["pgid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(payload["pgid"]) == []


def test_launch_ready_complete_stop(tiny_gguf, free_port):
    result = servepilot("launch", "--name", "tiny", "--detach", "--json", "--",
                        *llama_server_argv(tiny_gguf, free_port))
    launched = _json(result)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert launched["schema"] == "servepilot.launch/1"
        assert launched["state"] == "ready"
        assert launched["url"] == f"http://127.0.0.1:{free_port}"
        assert launched["served_models"] == [str(tiny_gguf)] or launched["served_models"][0].endswith("tiny-llama.gguf")
        assert launched["measured"]["kv_tokens"] > 0  # llama_kv_cache: N cells
        # The engine outlived the CLI that launched it, and serves.
        reply = httpx.post(f"{launched['url']}/v1/completions", json={"prompt": "hello",
                                                                      "max_tokens": 4}, timeout=PATIENCE_S)
        assert reply.status_code == 200
        body = reply.json()
        assert body["usage"]["completion_tokens"] > 0
        assert isinstance(body["choices"][0]["text"], str)
        # Other verbs from a new shell.
        ps = _json(servepilot("ps", "--json"))
        assert [(r["name"], r["state"]) for r in ps["runs"]] == [("tiny", "ready")]
        stopped = servepilot("stop", "tiny", "--json")
        assert stopped.returncode == 0, stopped.stderr
        assert _json(stopped)["state"] == "stopped"
    finally:
        servepilot("stop", launched["run_id"])
    _no_orphans(launched)
    ps = _json(servepilot("ps", "--json"))
    assert ps["runs"][0]["state"] == "stopped"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_a_foreground_run(tiny_gguf, free_port, sig):
    cli = subprocess.Popen(
        [sys.executable, "-c", "from servepilot.cli.main import run; run()", "launch", "--",
         *llama_server_argv(tiny_gguf, free_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    seen = []
    try:
        for line in cli.stdout:
            seen.append(line)
            if line.startswith("serving;"):
                break
        assert any(line.startswith("ready after") for line in seen), "".join(seen)
        cli.send_signal(sig)
        rest = cli.communicate(timeout=PATIENCE_S)[0]
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        cli.stdout.close()
        ps = _json(servepilot("ps", "--json"))
        run = ps["runs"][0]
        if run["state"] in ("starting", "ready"):
            servepilot("stop", run["id"])  # never leave an engine behind, even on failure
    assert cli.returncode == 130, "".join(seen) + rest
    assert run["state"] == "stopped"
    assert group_members(run["pid"]) == []


def _failed_launch(argv) -> dict:
    # --force: check may well predict these failures (a missing model file); the point here
    # is what happens when the engine itself fails.
    result = servepilot("launch", "--force", "--json", "--", *argv)
    payload = _json(result)
    assert result.returncode == 3, result.stdout + result.stderr
    assert payload["state"] == "failed"
    _no_orphans(payload)
    ps = _json(servepilot("ps", "--json"))
    assert [r["state"] for r in ps["runs"]] == ["failed"]
    category = payload["diagnosis"]["root_cause"]["category"]
    assert category in CATEGORIES
    return payload


def test_missing_model_file_fails_with_a_diagnosis(tmp_path, free_port):
    payload = _failed_launch(llama_server_argv(tmp_path / "absent.gguf", free_port))
    root = payload["diagnosis"]["root_cause"]
    assert root["category"] == "other"
    assert "does not exist" in (root.get("message") or root.get("excerpt") or "")


def test_truncated_gguf_fails_with_a_diagnosis(tiny_gguf, tmp_path, free_port):
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_gguf.read_bytes()[: tiny_gguf.stat().st_size // 2])
    payload = _failed_launch(llama_server_argv(truncated, free_port))
    assert payload["diagnosis"]["root_cause"]["category"] in ("other", "unsupported_arch")


def test_port_in_use_fails_as_port_in_use(tiny_gguf, free_port):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", free_port))
        squatter.listen()
        payload = _failed_launch(llama_server_argv(tiny_gguf, free_port))
    assert payload["diagnosis"]["root_cause"]["category"] == "port_in_use"
