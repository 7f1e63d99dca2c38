"""Suite-wide fixtures: every test gets its own servepilot state directory."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    # Runs and history must never land in the developer's real state directory.
    monkeypatch.setenv("SERVEPILOT_HOME", str(tmp_path_factory.mktemp("sp-home")))
    monkeypatch.delenv("SERVEPILOT_DEBUG", raising=False)
    # Nothing in the suite may reach the real Hugging Face Hub: the remote-reading tests
    # point HF_ENDPOINT at their own fake Hub on 127.0.0.1 and switch this off themselves.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SERVEPILOT_CACHE", str(tmp_path_factory.mktemp("sp-cache")))
