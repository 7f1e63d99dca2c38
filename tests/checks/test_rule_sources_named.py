"""What `servepilot explain` shows for a rule matches the knowledge it reads: versions as the
fact files give them, and the engine file@tag each fact was read from."""

from __future__ import annotations

import re

from servepilot.checks.registry import find_rule, load_rules
from servepilot.engines import knowledge as kb


def test_the_architecture_rule_names_qwen3_first_release_as_the_registry_fact_does():
    load_rules()
    since = kb.load_file("vllm", "architectures")["early"]["since"]["Qwen3ForCausalLM"]
    facts = " ".join(find_rule("SP-ARCH-001").facts)
    assert f"Qwen3 {since}" in facts


def test_rules_name_the_engine_files_their_new_facts_come_from():
    load_rules()
    for code, needed in (
        ("SP-MOE-001", ("trtllm_bf16_moe.py@v0.20.0", "oracle/unquantized.py@v0.20.0")),
        ("SP-MEM-001", ("quantization/fp8.py@v0.16.0", "quantization/fp8.py@v0.13.0")),
        ("SP-LEN-003", ("arg_utils.py@v0.8.5",)),
    ):
        sources = " ".join(find_rule(code).sources)
        for file_at_tag in needed:
            assert re.search(re.escape(file_at_tag), sources), (code, file_at_tag)
