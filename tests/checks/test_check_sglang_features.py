"""SP-GPU-003: SGLang's --enable-pdmux knows SM limits for compute capability 6.x-9.x only."""

from __future__ import annotations

import pytest
from checkfixtures import GIB, codes, deployment, llama_like

from servepilot.checks import run_checks


@pytest.mark.parametrize(
    "cc, options, fails",
    [
        ((12, 0), {"enable_pdmux": True}, True),
        ((10, 0), {"enable_pdmux": True}, True),
        ((9, 0), {"enable_pdmux": True}, False),
        (
            (12, 0),
            {"enable_pdmux": True, "pdmux_config_path": "pdmux.yaml"},
            False,
        ),  # manual divisions possible
        ((12, 0), {}, False),
    ],
)
def test_pdmux_needs_a_known_generation(tmp_path, cc, options, fails):
    dep = deployment(
        llama_like(tmp_path / "l"),
        cc=cc,
        n=1,
        version="0.5.17",
        engine="sglang",
        options={"tp_size": 1, **options},
        memory=96 * GIB,
    )
    assert ("SP-GPU-003" in codes(run_checks(dep))) == fails


def test_dropping_the_flag_clears_it(tmp_path):
    dep = deployment(
        llama_like(tmp_path / "l"),
        cc=(12, 0),
        n=1,
        version="0.5.17",
        engine="sglang",
        options={"tp_size": 1, "enable_pdmux": True},
        memory=96 * GIB,
    )
    (f,) = [f for f in run_checks(dep).findings if f.code == "SP-GPU-003"]
    assert "Unsupported compute capability: 12.0" in f.detail and f.remedies[0].args["unset"] == [
        "enable_pdmux"
    ]
