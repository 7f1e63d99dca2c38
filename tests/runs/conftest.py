"""Fixtures for the run tests: a free port and the fake engine's command line."""

import socket
import sys
from pathlib import Path

import pytest

FAKE_ENGINE = Path(__file__).with_name("fake_engine.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def fake_cmd(port):
    """fake_cmd(*extra) -> argv of the fake engine on a free port."""

    def make(*extra: str) -> list[str]:
        return [sys.executable, str(FAKE_ENGINE), "--port", str(port), "--host", "127.0.0.1", *extra]

    return make
