"""--max-num-batched-tokens below max_model_len with chunked prefill off (SchedulerConfig)."""

from __future__ import annotations

import pytest
from checkfixtures import GIB, codes, deployment, finding, llama_like

from servepilot.checks import run_checks


@pytest.mark.parametrize(
    "options, refused",
    [
        ({"enable_chunked_prefill": False, "max_num_batched_tokens": 8192}, True),  # 131072 derived
        (
            {
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": 8192,
                "max_model_len": 8192,
            },
            False,
        ),
        ({"enable_chunked_prefill": True, "max_num_batched_tokens": 8192}, False),
        ({"max_num_batched_tokens": 8192}, False),  # left to the engine: not claimed
        ({"enable_chunked_prefill": False}, False),  # the engine sizes the budget itself
    ],
)
def test_budget_below_max_model_len_without_chunked_prefill(tmp_path, options, refused):
    path = llama_like(tmp_path / "m", max_pos=131072)
    result = run_checks(
        deployment(path, cc=(8, 0), n=1, version="0.24.0", memory=80 * GIB, options=options)
    )
    assert ("SP-LEN-003" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-LEN-003")
        assert f.category == "max_model_len" and f.severity == "error"
        assert "max_num_batched_tokens (8192) is smaller than max_model_len (131072)" in f.detail


def test_not_claimed_before_the_releases_read(tmp_path):
    path = llama_like(tmp_path / "m", max_pos=131072)
    options = {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192}
    result = run_checks(
        deployment(path, cc=(8, 0), n=1, version="0.4.3", memory=80 * GIB, options=options)
    )
    assert "SP-LEN-003" not in codes(result)


@pytest.mark.parametrize(
    "version, env, options, refused",
    [
        ("0.8.5", {}, {}, False),  # V1 overwrites the flag with True (_set_default_args_v1)
        ("0.10.2", {}, {}, False),
        ("0.11.0", {}, {}, False),
        ("0.10.2", {"VLLM_USE_V1": "0"}, {}, True),  # V0 keeps the user's choice
        ("0.11.0", {}, {"runner": "pooling"}, True),  # pooling runners are spared
        ("0.12.0", {}, {}, True),  # from 0.12.0 only an unset flag is defaulted
        ("0.14.1", {}, {}, True),
    ],
)
def test_v1_engine_forcing_chunked_prefill_on(tmp_path, version, env, options, refused):
    path = llama_like(tmp_path / "m", max_pos=131072)
    options = {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192, **options}
    dep = deployment(path, cc=(8, 0), n=1, version=version, memory=80 * GIB, options=options)
    dep.launch.shell.env.update(env)
    assert ("SP-LEN-003" in codes(run_checks(dep))) is refused
