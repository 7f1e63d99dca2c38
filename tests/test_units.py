"""Byte units: the one formatter the CLI and library layers share."""

from __future__ import annotations

import pytest

from servepilot import units
from servepilot.cli import output


@pytest.mark.parametrize(
    "n, text",
    [(None, "?"), (0, "0 B"), (1023, "1023 B"), (1536, "1.50 KiB"), (16_060_522_496, "14.96 GiB"),
     (595_000_000_000, "554.14 GiB"), (3 * units.TiB, "3.00 TiB"), (-2 * units.MiB, "-2.00 MiB")],
)
def test_human_bytes(n, text):
    assert units.human_bytes(n) == text


def test_gib_keeps_one_unit_with_separators():
    assert units.gib(1234.5 * units.GiB) == "1,234.50 GiB"
    assert units.gib(units.MiB, unit=False) == "0.00"
    assert units.gib(None) == "?"


def test_cli_output_reexports_the_same_functions():
    assert output.human_bytes is units.human_bytes and output.gib is units.gib


def test_engine_unit_words():
    # SGLang's "GB" figures are converted by the log rules' own "units" (GiB); "GB" here is decimal
    assert units.UNIT_BYTES["GiB"] == 1 << 30 and units.UNIT_BYTES["GB"] == 10**9
