"""SGLang's memory defaults on release lines without a golden file (tools/sglang_golden.py
needs an environment per release; these lines were read from their sdists only).

Each expected figure was worked out by hand from that release's server_args.py, following the
arithmetic written next to it, not by running servepilot: a wrong tier, coefficient or range
in knowledge/memory.yaml changes at least one of them.
"""

from __future__ import annotations

import pytest

from servepilot.engines.sglang.memory import defaults

H100, H200, B200, A100 = 81559, 143771, 183359, 81920
L40S, RTX_5090, RTX_4090 = 46068, 32607, 24564

CASES = [
    # 0.4.0 to 0.4.4: a fraction per tp, whatever the GPU; 8192 / 160 above 25,000 MiB
    ("0.4.2.post4", H100, 1, 0.88, 8192, 160),
    ("0.4.2.post4", H200, 8, 0.81, 8192, 160),  # no large-GPU raise yet
    ("0.4.0", RTX_4090, 4, 0.85, 2048, 80),  # < 25,000 MiB: 2048, bs 80 at tp >= 4
    ("0.4.4.post1", RTX_4090, 1, 0.88, 2048, 8),
    # 0.4.5: the tp table up to 80 GiB, above it all but 13 GiB: (143771 - 13312) / 143771
    ("0.4.5.post3", A100, 2, 0.87, 8192, None),
    ("0.4.5", H200, 1, (143771 - 13312) / 143771, 8192, None),
    # 0.4.7 to 0.5.2: reserved GiB by tier; H100 tp2: (81559 - 10.5 * 1024) / 81559 = 0.868
    ("0.4.9.post6", H100, 2, 0.868, 8192, None),
    ("0.4.7", L40S, 1, 0.778, 8192, None),  # 9.5 + 0.5 GiB: 35828 / 46068
    ("0.5.1.post3", RTX_5090, 1, 0.909, 2048, 8),  # 2.8 + 0.1 GiB
    ("0.4.10", B200, 8, 0.821, 16384, None),  # a fixed 32 GiB above 160 GiB
    # 0.5.3: 512 + 1.5 * 2048 + 2 * 16 + 128 = 3744 MiB reserved on a 24 GiB GPU
    ("0.5.3.post1", RTX_4090, 1, 0.848, 2048, 16),
    # 0.5.4 raised that tier's graph batch size to 24: 3760 MiB
    ("0.5.4", RTX_4090, 1, 0.847, 2048, 24),
    # 0.5.7 on H100: 512 + 12288 + 512 + 128 = 13440 MiB (over the 10 GiB floor), no piecewise
    ("0.5.7", H100, 1, 0.835, 8192, 256),
    ("0.5.9", L40S, 4, 0.837, 4096, 160),  # 512 + 6144 + 320 + 512 = 7488
    # 0.5.11 = 0.5.10: 13440 + 58 captured piecewise sizes up to 8192 x 8 MiB = 13904
    ("0.5.11", H100, 1, 0.83, 8192, 256),
]


@pytest.mark.parametrize("version,mem,tp,fraction,chunked,graph_bs", CASES)
def test_defaults_as_the_release_computes_them(version, mem, tp, fraction, chunked, graph_bs):
    got = defaults(version, mem, tp=tp, arch="LlamaForCausalLM")
    assert got is not None, f"{version} has no memory rows"
    assert got.mem_fraction_static == pytest.approx(fraction, abs=1e-9)
    assert (got.chunked_prefill_size, got.cuda_graph_max_bs) == (chunked, graph_bs)
    assert "@v" in got.source


def test_before_0_4_6_the_table_ignores_pipeline_parallelism():
    # 0.4.5 had no --pp-size: its table is indexed by tp alone (0.4.6 uses tp * pp)
    assert defaults("0.4.5", A100, tp=1, pp=4).mem_fraction_static == 0.88
    assert defaults("0.4.6", A100, tp=1, pp=4).mem_fraction_static == 0.85


def test_piecewise_share_only_from_0_5_10():
    # the same GPU and sizes: 0.5.9 reserves no piecewise share, 0.5.10 does
    before = defaults("0.5.9", H100, tp=1, arch="LlamaForCausalLM").mem_fraction_static
    after = defaults("0.5.10", H100, tp=1, arch="LlamaForCausalLM").mem_fraction_static
    assert (before, after) == (0.835, 0.83)


@pytest.mark.parametrize("version", ["0.3.6.post3", "0.2.15", "0.5.12", "0.5.23", "0.6.0"])
def test_release_lines_not_read_have_no_defaults(version):
    assert defaults(version, H100, tp=1) is None
