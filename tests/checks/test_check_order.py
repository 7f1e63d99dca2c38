"""Findings come in the order the engine would hit them: the first error is the one it dies of."""

from __future__ import annotations

from checkfixtures import GIB, deployment, llama_like

from servepilot.checks import run_checks
from servepilot.checks.finding import Finding
from servepilot.checks.result import engine_stage, finding_stage

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def test_tp_divisibility_comes_before_the_quantization_capability(tmp_path):
    # VllmConfig.__post_init__ verifies the parallel layout before building the quant config
    path = llama_like(tmp_path / "m", heads=40, kv_heads=8, quant=AWQ, dtype="float16")
    result = run_checks(deployment(path, cc=(7, 0), n=3, version="0.16.0", memory=32 * GIB))
    errors = [f.code for f in result.errors]
    assert errors.index("SP-TP-001") < errors.index("SP-QUANT-001")


def test_config_stage_precedes_worker_model_and_memory_stages():
    order = ["SP-CODE-001", "SP-ARCH-001", "SP-LEN-001", "SP-TP-001", "SP-QUANT-001", "SP-CUDA-003",
             "SP-ATTN-001", "SP-MEM-001", "SP-MEM-003", "SP-MEM-002", "SP-PORT-001", "SP-TMPL-001"]
    assert [engine_stage(c) for c in order] == sorted(engine_stage(c) for c in order)


def test_kv_budget_failure_precedes_the_max_model_len_check():
    # determine_available_memory raises before check_enough_kv_cache_memory compares max_model_len
    assert engine_stage("SP-MEM-003") < engine_stage("SP-MEM-002")


def test_the_custom_code_review_note_sorts_after_launch_stages():
    # SP-CODE-002 as a warning lists files to review; a Marlin fallback or a KV warning says more
    # about the launch. As an error (a file missing) it is the config import, before the architecture.
    def stage(code, severity):
        return finding_stage(Finding(code, "remote_code", severity, "t", "d", (), ()))
    assert stage("SP-CODE-002", "warning") > max(engine_stage(c) for c in ("SP-QUANT-002", "SP-MEM-002", "SP-TMPL-001"))
    assert stage("SP-CODE-002", "error") < engine_stage("SP-ARCH-001") < engine_stage("SP-KV-004")
