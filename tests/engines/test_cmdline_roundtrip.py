"""Property: any command built from the vLLM 0.16 flag table parses, renders and re-parses to
the same options, whatever the values hold (spaces, quotes, $, JSON)."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from servepilot.engines.cmdline import parse_command, render_command
from servepilot.engines.flagtable import load_table

VT = load_table("vllm").for_version("0.16.0")
FLAGS = sorted(
    (name, spec) for name, spec in VT.by_name.items()
    if name.startswith("--") and spec.kind in ("int", "float", "str", "bool", "store_true", "json")
    and spec.dest not in ("model", "config", "attention_backend", "attention_config")
)
TEXT = st.text(alphabet=st.sampled_from(list("abcXYZ019 _./:'\"$=,{}")), min_size=1, max_size=12).filter(
    lambda s: not s.startswith("-") and s.strip() == s and s.strip()
)


def _value(kind):
    return {
        "int": st.integers(0, 10**6).map(str),
        "float": st.floats(0.01, 1.0, allow_nan=False).map(repr),
        "str": TEXT,
        "json": st.dictionaries(st.sampled_from(["a", "b", "level"]), st.integers(0, 9), min_size=1).map(json.dumps),
    }[kind]


@st.composite
def commands(draw):
    chosen = draw(st.lists(st.sampled_from(FLAGS), min_size=1, max_size=8, unique_by=lambda f: f[1].dest))
    argv = ["vllm", "serve", "/models/m"]
    for name, spec in chosen:
        if spec.kind in ("bool", "store_true"):
            on = draw(st.booleans()) if spec.kind == "bool" else True
            argv.append(name if on else "--no-" + name[2:])
        else:
            argv += [name, draw(_value(spec.kind))]
    env = draw(st.dictionaries(st.sampled_from(["NCCL_DEBUG", "VLLM_X", "HF_HOME"]), TEXT, max_size=2))
    return [f"{k}={v}" for k, v in env.items()] + argv, {spec.dest for _, spec in chosen}


@settings(max_examples=150, deadline=None)
@given(commands())
def test_round_trip(case):
    words, dests = case
    first = parse_command(words, engine_version="0.16.0")
    assert dests <= first.explicit
    assert first.unknown_flags == ()
    again = parse_command(render_command(first), engine_version="0.16.0")
    assert again.options == first.options
    assert again.shell.env == first.shell.env
