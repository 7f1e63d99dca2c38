"""Suite-wide fixtures: every test gets its own servepilot state directory."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    # Runs and history must never land in the developer's real state directory.
    monkeypatch.setenv("SERVEPILOT_HOME", str(tmp_path_factory.mktemp("sp-home")))
    monkeypatch.delenv("SERVEPILOT_DEBUG", raising=False)
