"""The quant config's ignore list: the fast matcher (names, prefixes, regex) answers exactly as
one regex over the whole list does."""

from __future__ import annotations

import itertools
import random
import re
from fnmatch import translate

from servepilot.checkpoint.estimate import _ignored


def reference(name: str, patterns: tuple[str, ...]) -> bool:
    """The rule written out once: an entry (glob, module name or "re:<regex>", without a
    "language_model." prefix) fully matches the module or the tensor name, or a dotted tail."""
    module = name.rsplit(".", 1)[0]
    for pattern in patterns:
        pattern = pattern.removeprefix("language_model.")
        if pattern.startswith("re:"):
            rx = re.compile(f".*?(?:{pattern[3:]}).*", re.S)
        else:
            rx = re.compile(r"(?:.*\.)?" + translate(pattern), re.S)
        if rx.fullmatch(module) or rx.fullmatch(name):
            return True
    return False


NAMES = [
    "lm_head.weight", "model.lm_head.weight", "model.embed_tokens.weight", "model.norm.weight",
    "model.layers.0.self_attn.q_a_proj.weight", "model.layers.10.self_attn.kv_b_proj.weight",
    "model.layers.1.mlp.experts.7.down_proj.weight", "model.layers.1.mlp.gate.weight",
    "model.layers.1.mlp.shared_experts.up_proj.weight", "mtp.0.eh_proj.weight", "weight",
]
PATTERNS = [
    "lm_head", "language_model.lm_head", "model.layers.1.self_attn*", "model.layers.1*",
    "self_attn*", "*gate", "model.layers.*.mlp.gate", "re:.*shared_experts.*", "mlp.experts.?",
    "layers.[01].mlp", "*", "", "language_model.model.layers.0.self_attn*", "gate", "mlp.gate*",
    "model.layers.1.mlp.experts.7.down_proj.weight", "down_proj", "layers.1",
]


def test_every_pattern_alone_and_in_pairs_answers_as_the_regex_does():
    for r in (1, 2):
        for combo in itertools.combinations(PATTERNS, r):
            for name in NAMES:
                assert _ignored(name, combo) is reference(name, combo), (name, combo)


def test_random_lists_answer_as_the_regex_does():
    rng = random.Random(11)
    for _ in range(300):
        combo = tuple(rng.sample(PATTERNS, rng.randint(0, 6)))
        for name in NAMES:
            assert _ignored(name, combo) is reference(name, combo), (name, combo)


def test_kimi_style_list_ignores_attention_only():
    patterns = ("language_model.lm_head",) + tuple(
        f"language_model.model.layers.{i}.self_attn*" for i in range(61))
    assert _ignored("language_model.model.layers.60.self_attn.o_proj.weight"[15:], patterns)
    assert _ignored("lm_head.weight", patterns)
    assert not _ignored("model.layers.6.mlp.experts.0.up_proj.weight", patterns)
    assert not _ignored("model.layers.61.self_attn.o_proj.weight", patterns)
