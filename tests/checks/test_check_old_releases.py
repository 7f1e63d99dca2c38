"""Facts for releases older than the first one read (0.10.0): looked up with the version as given."""

from __future__ import annotations

import pytest
from checkfixtures import GIB, codes, deployment, finding, llama_like

from servepilot.checks import run_checks

FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


@pytest.mark.parametrize("version, cc, minimum", [("0.4.1", (8, 6), 90), ("0.5.0", (8, 6), 89)])
def test_fp8_before_marlin_is_refused_below_native(tmp_path, version, cc, minimum):
    path = llama_like(tmp_path / "m", quant=FP8)
    f = finding(run_checks(deployment(path, cc=cc, n=1, version=version, memory=24 * GIB)), "SP-QUANT-001")
    assert f"Minimum capability: {minimum}. Current capability: 86." in f.detail


def test_fp8_from_010_on_ampere_is_the_marlin_fallback_not_an_error(tmp_path):
    path = llama_like(tmp_path / "m", quant=FP8)
    result = run_checks(deployment(path, cc=(8, 6), n=1, version="0.10.0", memory=80 * GIB))
    assert "SP-QUANT-001" not in codes(result) and "SP-QUANT-002" in codes(result)


@pytest.mark.parametrize("version, fails", [("0.2.0", True), ("0.2.1", False)])
def test_awq_on_turing_needed_80_until_021(tmp_path, version, fails):
    path = llama_like(tmp_path / "m", quant=AWQ, dtype="float16")
    assert ("SP-QUANT-001" in codes(run_checks(deployment(path, cc=(7,
                                                                    5), n=1, version=version,
                                                          memory=16 * GIB)))) is fails


@pytest.mark.parametrize("version, status", [("0.7.3", "error"), ("0.8.0", None)])
def test_gemma3_before_080_is_not_served(tmp_path, version, status):
    path = llama_like(tmp_path / "m", arch="Gemma3ForCausalLM", model_type="gemma3_text")
    result = run_checks(deployment(path, cc=(9, 0), n=1, version=version, memory=80 * GIB))
    found = [f for f in result.findings if f.code == "SP-ARCH-001"]
    assert (found[0].severity if found else None) == status
    if found:
        assert found[0].remedies[0].args == {"upgrade": {"package": "vllm", "specifier": ">=0.8.0"}}


@pytest.mark.parametrize("arch, model_type, version, expected", [
    ("Qwen2ForCausalLM", "qwen2", "0.6.0", None),  # in the 0.4.3 registry already
    ("Cohere2ForCausalLM", "cohere2", "0.6.5", "info"),  # absent in 0.6.4, present in 0.6.6: 0.6.5 unknown
    ("Cohere2ForCausalLM", "cohere2", "0.6.4", "error"),
    ("Glm4MoeForCausalLM", "glm4_moe", "0.9.2", "error"),  # in no old registry: absent up to 0.9.2
    ("ChatGLMForConditionalGeneration", "chatglm", "0.7.3", "error"),  # dropped in 0.7.3, back in 0.8.5
    ("ChatGLMForConditionalGeneration", "chatglm", "0.7.1", None),
])
def test_old_release_architectures_from_the_registries_read(tmp_path, arch, model_type, version, expected):
    path = llama_like(tmp_path / "m", arch=arch, model_type=model_type)
    found = [f for f in run_checks(deployment(path, cc=(9, 0), n=1, version=version, memory=80 * GIB)).findings
             if f.code == "SP-ARCH-001"]
    assert (found[0].severity if found else None) == expected


def test_architecture_absent_from_every_registry_read_is_absent_in_old_releases_too(tmp_path):
    path = llama_like(tmp_path / "m", arch="Gemma2ForSequenceClassification", model_type="gemma2")
    f = finding(run_checks(deployment(path, cc=(9, 0), n=1, version="0.6.5", memory=80 * GIB)), "SP-ARCH-001")
    assert f.severity == "error"


def _gemma2(tmp_path):
    path = llama_like(tmp_path / "m", arch="Gemma2ForCausalLM", model_type="gemma2")
    import json

    cfg = json.loads((path / "config.json").read_text())
    cfg["final_logit_softcapping"] = 30.0
    (path / "config.json").write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("version, cc, env, fails", [
    ("0.5.3", (9, 0), {}, True),  # FlashInfer only, whatever the GPU
    ("0.5.3", (9, 0), {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, False),
    ("0.6.2", (7, 5), {}, True),  # T4: no FlashAttention-2, XFormers refuses
    ("0.6.2", (8, 0), {}, False),
    ("0.18.0", (7, 5), {}, False),  # not judged from the first release read on
])
def test_soft_capped_attention_backend(tmp_path, version, cc, env, fails):
    result = run_checks(deployment(_gemma2(tmp_path), cc=cc, n=1, version=version, env=env, memory=80 * GIB))
    assert ("SP-ATTN-003" in codes(result)) is fails
    if fails:
        f = finding(result, "SP-ATTN-003")
        assert f.category == "attention_backend"
        assert f.remedies[0].args["env"]["set"] == {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}


def test_no_backend_because_of_the_kv_dtype_is_a_kv_cache_dtype_finding(tmp_path):
    from checkfixtures import kimi_like, sparse_mla

    # Kimi-K2.5-NVFP4 on SM120 at 0.16: the checkpoint's fp8 KV leaves no MLA backend; bf16 KV would start
    kimi = finding(run_checks(deployment(kimi_like(tmp_path / "k"), cc=(12, 0), n=8, version="0.16.0")), "SP-ATTN-001")
    assert kimi.category == "kv_cache_dtype"
    # DeepSeek-V3.2 sparse MLA on SM120: no backend whatever the KV dtype
    dsv32 = finding(run_checks(deployment(sparse_mla(tmp_path / "s"), cc=(12,
                                                                          0), n=8, version="0.16.0")), "SP-ATTN-001")
    assert dsv32.category == "attention_backend"


@pytest.mark.parametrize(
    "version, cc, env, expected",
    [("0.7.3", (9, 0), {"VLLM_USE_V1": "1"}, "error"),  # 0.7 V1: no FP8 KV path at all
     ("0.7.3", (9, 0), {}, None),  # V0 runs it
     ("0.8.5", (8, 6), {"VLLM_USE_V1": "1"}, "error"),  # not FA3: the oracle raises
     ("0.8.5", (9, 0), {"VLLM_USE_V1": "1"}, None),  # FA3 on Hopper keeps it on V1
     ("0.8.5", (8, 6), {}, None),  # falls back to V0 by itself
     ("0.10.0", (8, 6), {"VLLM_USE_V1": "1"}, None)],  # outside the facts' range
)
def test_fp8_kv_cache_on_the_early_v1_engine(tmp_path, version, cc, env, expected):
    path = llama_like(tmp_path / "m")
    result = run_checks(deployment(path, cc=cc, n=1, version=version, memory=80 * GIB, env=env,
                                   options={"kv_cache_dtype": "fp8"}))
    found = [f for f in result.findings if f.code == "SP-KV-004"]
    assert (found[0].severity if found else None) == expected
    if found:
        assert found[0].remedies[0].args == {"env": {"set": {}, "unset": ["VLLM_USE_V1"]}}


@pytest.mark.parametrize("version, cc, code", [
    ("0.4.3", (8, 6), "SP-QUANT-001"),  # 0.4.3 asks for 89
    ("0.6.4", (8, 6), "SP-QUANT-002"),  # 0.5.1-0.9: Marlin weight-only below 89
    ("0.6.4", (7, 5), "SP-QUANT-001"),  # below 80: refused
])
def test_fp8_between_051_and_010_falls_back_to_marlin_on_ampere(tmp_path, version, cc, code):
    path = llama_like(tmp_path / "m", quant=FP8)
    result = run_checks(deployment(path, cc=cc, n=1, version=version, memory=80 * GIB))
    assert code in codes(result)
    if code == "SP-QUANT-002":
        assert "SP-QUANT-001" not in codes(result)


def test_fbgemm_fp8_in_053_runs_weight_only_on_ampere(tmp_path):
    path = llama_like(tmp_path / "m", quant={"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0})
    result = run_checks(deployment(path, cc=(8, 6), n=1, version="0.5.3", memory=80 * GIB))
    assert "SP-QUANT-001" not in codes(result) and "SP-QUANT-002" in codes(result)


@pytest.mark.parametrize("version, status", [
    ("0.24.0", "native"), ("0.25.0", "absent"), ("0.34.0", "absent"),
])
def test_architectures_vllm_retired_are_absent_from_the_release_that_dropped_them(version, status):
    from servepilot.engines.vllm.release import architecture_status, retired_in

    assert architecture_status("BaichuanForCausalLM", version)[0] == status
    assert (retired_in("BaichuanForCausalLM", version) is not None) == (status == "absent")


def test_a_retired_name_registered_again_is_native_again():
    from servepilot.engines.vllm.release import architecture_status

    releases = ("0.26.0", "0.27.0", "0.32.0")
    states = [architecture_status("ExaoneMoEForCausalLM", v)[0] for v in releases]
    assert states == ["native", "absent", "native"]


def test_reads_after_0_18_know_new_architectures_and_keep_between_reads_unknown():
    from servepilot.engines.vllm.release import architecture_status

    assert architecture_status("DeepseekV4ForCausalLM", "0.20.0") == ("native", "0.20.0")
    assert architecture_status("DeepseekV4ForCausalLM", "0.19.0")[0] == "absent"
    # between two reads
    assert architecture_status("DeepseekV4ForCausalLM", "0.19.1")[0] == "unknown"
    assert architecture_status("NoSuchArchForCausalLM", "0.34.0")[0] == "absent"
    # past the newest read
    assert architecture_status("NoSuchArchForCausalLM", "0.35.0")[0] == "unknown"


def test_check_names_the_retirement_and_offers_the_last_releases(tmp_path):
    baichuan = llama_like(tmp_path / "b", arch="BaichuanForCausalLM", model_type="baichuan")
    dep = deployment(baichuan, cc=(9, 0), n=1, version="0.25.0", memory=80 * GIB)
    f = finding(run_checks(dep), "SP-ARCH-001")
    assert f.severity == "error" and "was supported in vLLM until v0.23.0" in f.detail
    assert f.remedies[0].args == {"upgrade": {"package": "vllm", "specifier": "<0.25.0"}}
    older = deployment(baichuan, cc=(9, 0), n=1, version="0.24.0", memory=80 * GIB)
    assert "SP-ARCH-001" not in codes(run_checks(older))


@pytest.mark.parametrize("version, unknown", [("0.4.3", True), ("0.5.2", True), ("0.5.3", False),
                                              ("0.9.2", False), ("0.10.0", False)])
def test_attention_of_an_unread_release_is_unknown_not_a_pass(tmp_path, version, unknown):
    # before 0.5.3 the backend rules are 0.10.0's: without any error, the verdict cannot be pass;
    # 0.5.3-0.9.x choose by knowledge/old_attention.yaml (Llama's head size 128 runs everywhere)
    path = llama_like(tmp_path / "m")
    result = run_checks(deployment(path, cc=(9, 0), n=1, version=version, memory=80 * GIB))
    facts = [u.fact for u in result.unknowns]
    assert ("attention backend" in facts) is unknown
    assert (result.verdict == "unknown") is unknown


W8A16 = {"quant_method": "compressed-tensors", "ignore": ["lm_head"], "config_groups": {"group_0": {
    "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}}


@pytest.mark.parametrize("version, refused", [("0.5.5", True), ("0.6.3", False), ("0.6.6", False)])
def test_compressed_tensors_w8a16_ran_on_marlin_alone_before_06(tmp_path, version, refused):
    # Qwen2-72B's MLP: 29568 / TP 4 = 7392 rows into the down projection, 7392 % 128 = 96;
    # the merged gate/up output 2 x 7392 = 14784 divides by 64, so min_thread_k is what fails.
    # 0.6.6 picks among kernels (not claimed); 0.6.0-0.6.5 were not read (no claim either).
    path = llama_like(tmp_path / "m", heads=64, quant=W8A16, intermediate=29568)
    result = run_checks(deployment(path, cc=(8, 0), n=4, version=version, memory=80 * GIB))
    found = [f for f in result.findings if f.code == "SP-QUANT-004"]
    assert bool(found) is refused
    if found:
        assert found[0].detail.startswith(
            "Weight input_size_per_partition = 7392 is not divisible by min_thread_k = 128")
        assert found[0].category == "tp_divisibility" and found[0].severity == "error"


@pytest.mark.parametrize("version, status", [("0.8.3", "error"), ("0.8.4", None)])
def test_qwen3_is_registered_from_084(tmp_path, version, status):
    # registry.py@v0.8.4 lists Qwen3ForCausalLM; @v0.8.3 does not
    path = llama_like(tmp_path / "m", arch="Qwen3ForCausalLM", model_type="qwen3")
    result = run_checks(deployment(path, cc=(8, 0), n=1, version=version, memory=80 * GIB))
    found = [f for f in result.findings if f.code == "SP-ARCH-001"]
    assert (found[0].severity if found else None) == status
