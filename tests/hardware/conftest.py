"""Load the fake NVML by path (tests/ is not a package)."""

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("servepilot_tests_fake_nvml", Path(__file__).with_name("fake_nvml.py"))
fake_nvml = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fake_nvml  # dataclasses look their module up there
_spec.loader.exec_module(fake_nvml)


@pytest.fixture
def nvml():
    """The fake_nvml module: FakeNvml, FakeGpu, install(), canned machines."""
    return fake_nvml
