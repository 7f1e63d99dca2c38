"""gpt-oss on vLLM 0.10.1+: MXFP4 expert memory per release and attention sinks per backend.

Facts read from the vLLM sdists named in planning/knowledge/vllm_memory.yaml
(mxfp4_moe_padding, sampler_bytes_per_logit) and engines/vllm/knowledge/attention.yaml.
"""

from __future__ import annotations

from checkfixtures import codes, deployment, finding, gpt_oss_120b

from servepilot.checks import run_checks

H100_MEMORY = 81559 * 2**20  # NVIDIA H100 80GB HBM3 as nvidia-smi reports it


def _h100(path, version, options=None, env=None):
    return deployment(path, cc=(9, 0), n=1, version=version, memory=H100_MEMORY, options=options, env=env)


def test_gpt_oss_120b_from_pip_on_one_h100_at_0101_has_no_kv_budget(tmp_path):
    # issue #23278: Marlin-padded experts ("Model loading took 65.9651 GiB") and the sorting
    # sampler over 1,024 x 201,088 logits leave "Available KV cache memory: -2.14 GiB"
    result = run_checks(_h100(gpt_oss_120b(tmp_path / "oss"), "0.10.1"))
    assert result.verdict == "fail"
    assert (finding(result, "SP-MEM-003").severity, result.findings[0].category) == ("error", "oom_kv_cache")


def test_fewer_sequences_leave_a_kv_budget_that_is_too_short_for_131k(tmp_path):
    # the neighbour: a quarter of the sampler warm-up; the KV budget is positive again, and the
    # thread's other report (131k does not start, 100k does) is the max_model_len finding
    result = run_checks(_h100(gpt_oss_120b(tmp_path / "oss"), "0.10.1", options={"max_num_seqs": 256}))
    assert "SP-MEM-003" not in codes(result)
    assert finding(result, "SP-MEM-002").category == "max_model_len"
    fits = run_checks(_h100(gpt_oss_120b(tmp_path / "oss"), "0.10.1",
                            options={"max_num_seqs": 256, "max_model_len": 65536}))
    assert fits.verdict == "pass"


def test_from_012_triton_experts_fit_one_h100(tmp_path):
    # 0.12 vendors triton_kernels: Hopper's experts are no longer padded for Marlin
    assert run_checks(_h100(gpt_oss_120b(tmp_path / "oss"), "0.12.0")).verdict == "pass"
