"""vLLM before 0.10.0 (knowledge/old_attention.yaml): V0/V1 per release, the backend each picks
and refuses, the V1 oracle's refusals under VLLM_USE_V1=1, and the pipeline-parallel list."""

from __future__ import annotations

import json

import pytest
from checkfixtures import GIB, codes, deployment, finding, llama_like

from servepilot.checks import run_checks
from servepilot.checks.result import engine_stage

BNB = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}


def _model(tmp_path, name="m", *, head_dim=None, **kw):
    kw.setdefault("dtype", "float16")
    path = llama_like(tmp_path / name, max_pos=4096, **kw)
    if head_dim is not None:
        config = json.loads((path / "config.json").read_text())
        config["head_dim"] = head_dim
        (path / "config.json").write_text(json.dumps(config))
    return path


def _check(path, version, cc, env=None, **kw):
    kw.setdefault("memory", 80 * GIB)
    return run_checks(
        deployment(path, cc=cc, n=kw.pop("n", 1), version=version, env=env or {}, **kw)
    )


def _attention_unknowns(result):
    return [u for u in result.unknowns if u.fact == "attention backend"]


# vllm/v1/attention/backends/flash_attn.py@v0.7.2 line 156:
#   assert is_fa_version_supported(self.fa_version)
def test_v1_opt_in_on_volta_in_072_asserts_the_flash_attention_version(tmp_path):
    result = _check(_model(tmp_path), "0.7.2", (7, 0), {"VLLM_USE_V1": "1"})
    f = finding(result, "SP-ATTN-011")
    assert f.severity == "error" and f.category == "attention_backend"
    assert "assert is_fa_version_supported(self.fa_version)" in f.detail
    assert f.remedies[0].args == {"env": {"set": {}, "unset": ["VLLM_USE_V1"]}}


@pytest.mark.parametrize(
    "version, cc, env",
    [
        ("0.7.2", (7, 0), {}),  # V1 is opt-in in 0.7.x: V0 picks XFormers on Volta
        ("0.7.2", (8, 0), {"VLLM_USE_V1": "1"}),  # FlashAttention-2 runs on Ampere
        (
            "0.6.6",
            (7, 0),
            {"VLLM_USE_V1": "1"},
        ),  # no V1 engine before 0.7.0: the variable is not read
    ],
)
def test_neighbours_of_the_072_v1_assert_pass_the_attention_stage(tmp_path, version, cc, env):
    result = _check(_model(tmp_path), version, cc, env)
    assert "SP-ATTN-011" not in codes(result) and not _attention_unknowns(result)


# vllm/engine/arg_utils.py@v0.8.0 _raise_or_fallback:
#   NotImplementedError: VLLM_USE_V1=1 is not supported with Compute Capability < 8.0.
def test_v1_forced_on_turing_in_080_is_refused_by_the_oracle(tmp_path):
    result = _check(_model(tmp_path), "0.8.0", (7, 5), {"VLLM_USE_V1": "1"})
    f = finding(result, "SP-V1-001")
    assert f.category == "attention_backend"
    assert "VLLM_USE_V1=1 is not supported with Compute Capability < 8.0." in f.detail
    assert result.errors[0].code == "SP-V1-001"


def test_v1_left_unset_on_turing_in_080_falls_back_to_v0(tmp_path):
    result = _check(_model(tmp_path), "0.8.0", (7, 5))
    assert not {"SP-V1-001", "SP-ATTN-011"} & set(codes(result))
    assert not _attention_unknowns(result) and result.verdict != "unknown"


# vllm/engine/arg_utils.py@v0.8.0 V1_UNSUPPORTED_QUANT = ["bitsandbytes", "gguf"];
# @v0.8.3 it is ["gguf"]: "VLLM_USE_V1=1 is not supported with --quantization bitsandbytes."
@pytest.mark.parametrize("version, refused", [("0.8.0", True), ("0.8.2", True), ("0.8.5", False)])
def test_bitsandbytes_with_v1_forced_until_082(tmp_path, version, refused):
    result = _check(
        _model(tmp_path, quant=BNB), version, (8, 9), {"VLLM_USE_V1": "1"}, memory=24 * GIB
    )
    found = [f for f in result.findings if f.code == "SP-V1-001"]
    assert bool(found) is refused
    if refused:
        assert found[0].category == "quantization_support"
        assert "VLLM_USE_V1=1 is not supported with --quantization bitsandbytes." in found[0].detail


# vllm/attention/backends/xformers.py@v0.6.2 XFormersImpl.__init__:
#   ValueError: Head size 160 is not supported by PagedAttention. Supported head sizes are: [...]
def test_v0_xformers_refuses_a_head_size_paged_attention_lacks(tmp_path):
    result = _check(_model(tmp_path, head_dim=160), "0.6.2", (7, 5))
    f = finding(result, "SP-ATTN-011")
    assert "Head size 160 is not supported by PagedAttention" in f.detail
    assert "[64, 80, 96, 112, 120, 128, 192, 256]" in f.detail  # 0.6.2's list: no 32 yet


def test_flash_attention_2_takes_head_size_160_on_ampere(tmp_path):
    # the V0 selector keeps FLASH_ATTN (its list has 160): XFormers never sees the head size
    result = _check(_model(tmp_path, head_dim=160), "0.6.2", (8, 0))
    assert "SP-ATTN-011" not in codes(result) and not _attention_unknowns(result)


@pytest.mark.parametrize("version, refused", [("0.6.3", True), ("0.6.4", False)])
def test_paged_attention_gained_head_size_32_in_064(tmp_path, version, refused):
    # 32 is in FlashAttention-2's list but not below 8.0, where XFormers pages it
    result = _check(_model(tmp_path, head_dim=32), version, (7, 5))
    assert ("SP-ATTN-011" in codes(result)) is refused


def test_v1_flash_attention_head_size_refusal_on_ampere_in_085(tmp_path):
    # vllm/v1/attention/backends/flash_attn.py@v0.8.5:
    #   Head size 80 is not supported by FlashAttention.
    result = _check(_model(tmp_path, head_dim=80), "0.8.5", (8, 0))
    f = finding(result, "SP-ATTN-011")
    assert "Head size 80 is not supported by FlashAttention" in f.detail
    # the same model with VLLM_USE_V1=0: V0 falls back to XFormers, whose list has 80
    v0 = _check(_model(tmp_path, "m0", head_dim=80), "0.8.5", (8, 0), {"VLLM_USE_V1": "0"})
    assert "SP-ATTN-011" not in codes(v0) and not _attention_unknowns(v0)


def test_092_runs_flex_attention_for_a_head_size_flash_attention_lacks(tmp_path):
    # vllm/platforms/cuda.py@v0.9.2: supports_head_size(FLASH_ATTN_V1, 80) is False -> FlexAttention
    result = _check(_model(tmp_path, head_dim=80), "0.9.2", (8, 0))
    assert "SP-ATTN-011" not in codes(result) and not _attention_unknowns(result)


def test_a_release_whose_v1_choice_was_not_read_stays_unknown(tmp_path):
    # 0.9.0 was not read (0.8.5 refuses head size 80 on V1, 0.9.2 runs FlexAttention): not guessed
    result = _check(_model(tmp_path, head_dim=80), "0.9.0", (8, 0))
    assert "SP-ATTN-011" not in codes(result)
    assert [u for u in _attention_unknowns(result) if "was not read" in u.why]


def test_091_on_blackwell_leaves_the_choice_to_the_host(tmp_path):
    # FlashInfer if it imports, else FlashAttention, which has no head size 80: unknown, not a guess
    result = _check(_model(tmp_path, head_dim=80), "0.9.1", (10, 0))
    assert "SP-ATTN-011" not in codes(result)
    assert [u for u in _attention_unknowns(result) if "if it is installed" in u.why]
    hopper = _check(_model(tmp_path, "h", head_dim=80), "0.9.1", (9, 0))
    assert (
        "Head size 80 is not supported by FlashAttention" in finding(hopper, "SP-ATTN-011").detail
    )


def test_releases_before_the_modelled_ones_keep_the_old_unknown(tmp_path):
    result = _check(_model(tmp_path), "0.4.3", (7, 0))
    assert [u for u in _attention_unknowns(result) if "servepilot read vLLM 0.10.0" in u.why]


# vllm/config.py@v0.6.2 verify_with_parallel_config: NotImplementedError: Pipeline
# parallelism is only supported for the following  architectures: [...]
def test_pipeline_parallel_gemma2_refused_by_the_062_list(tmp_path):
    path = _model(tmp_path, arch="Gemma2ForCausalLM", model_type="gemma2")
    result = _check(path, "0.6.2", (8, 0), n=1, options={"pipeline_parallel_size": 2})
    f = finding(result, "SP-PP-001")
    assert f.category == "unsupported_arch" and "Qwen2VLForConditionalGeneration" in f.detail
    assert f.remedies[0].args == {"set": {"pipeline_parallel_size": 1}, "unset": []}


@pytest.mark.parametrize(
    "arch, model_type, version",
    [
        ("LlamaForCausalLM", "llama", "0.6.2"),  # on the list
        ("Gemma2ForCausalLM", "gemma2", "0.6.3"),  # the list is gone (SupportsPP per model class)
        ("Qwen2ForCausalLM", "qwen2", "0.5.4"),  # added to the list in 0.5.4
    ],
)
def test_pipeline_parallel_neighbours_pass(tmp_path, arch, model_type, version):
    path = _model(tmp_path, arch=arch, model_type=model_type)
    result = _check(path, version, (8, 0), n=1, options={"pipeline_parallel_size": 2})
    assert "SP-PP-001" not in codes(result)


def test_qwen2_pipeline_parallel_refused_before_054(tmp_path):
    path = _model(tmp_path, arch="Qwen2ForCausalLM", model_type="qwen2")
    result = _check(path, "0.5.3", (8, 0), n=1, options={"pipeline_parallel_size": 2})
    assert "SP-PP-001" in codes(result)


def test_stages_put_the_oracle_and_pp_list_at_config_time():
    # the oracle runs after ModelConfig, before VllmConfig's parallel checks; the PP list right
    # after the heads/TP check; both before any worker starts (dtype) or attention layer is built
    assert engine_stage("SP-LEN-001") < engine_stage("SP-V1-001") < engine_stage("SP-TP-001")
    assert engine_stage("SP-TP-001") < engine_stage("SP-PP-001") < engine_stage("SP-QUANT-001")
    assert engine_stage("SP-PP-001") < engine_stage("SP-DTYPE-001") < engine_stage("SP-ATTN-011")
    # LMCache's adapter fails on the first request, after every start-up stage
    assert engine_stage("SP-MEM-002") < engine_stage("SP-PORT-001") < engine_stage("SP-ATTN-012")


# vllm/attention/backends/flashinfer.py@v0.6.2:
#   `except ImportError: BatchDecodeWithPagedKVCacheWrapper = None`
@pytest.mark.parametrize(
    "env, listed", [({"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, True), ({}, False)]
)
def test_forced_flashinfer_before_010_leaves_the_package_to_the_host(tmp_path, env, listed):
    result = _check(_model(tmp_path), "0.6.2", (8, 0), env)
    hosts = [u for u in result.unchecked if "flashinfer package" in u.why]
    assert bool(hosts) is listed
    assert "SP-ATTN-011" not in codes(result) and not _attention_unknowns(result)


def test_073_v1_on_turing_names_the_unsupported_version_none(tmp_path):
    # vllm/attention/backends/utils.py@v0.7.3 get_flash_attn_version returns None below 8.0
    result = _check(_model(tmp_path), "0.7.3", (7, 5), {"VLLM_USE_V1": "1"})
    assert "Unsupported FA version: None" in finding(result, "SP-ATTN-011").detail


# vllm/config.py@v0.6.1 verify_with_parallel_config:
#   ValueError: BitAndBytes quantization with TP or PP is not supported yet.
@pytest.mark.parametrize(
    "version, n, refused", [("0.6.1", 2, True), ("0.6.1", 1, False), ("0.6.2", 2, False)]
)
def test_bitsandbytes_with_tensor_parallel_before_062(tmp_path, version, n, refused):
    result = _check(
        _model(tmp_path, quant=BNB), version, (8, 0), n=n, options={"enforce_eager": True}
    )
    found = [f for f in result.findings if f.code == "SP-PP-002"]
    assert bool(found) is refused
    if refused:
        assert "BitAndBytes quantization with TP or PP is not supported yet." in found[0].detail


@pytest.mark.parametrize(
    "version, options, refused",
    [
        (
            "0.5.4",
            {},
            True,
        ),  # ValueError: BitAndBytes with enforce_eager = False is not supported yet.
        ("0.5.4", {"enforce_eager": True}, False),
        ("0.5.5", {}, False),  # warns and falls back to eager mode
    ],
)
def test_bitsandbytes_without_enforce_eager_only_in_054(tmp_path, version, options, refused):
    result = _check(_model(tmp_path, quant=BNB), version, (8, 0), n=1, options=options)
    assert ("SP-PP-002" in codes(result)) is refused


LMCACHE = '{"kv_connector":"LMCacheConnector","kv_role":"kv_both"}'


# LMCache lmcache/integration/vllm/vllm_adapter.py: assert isinstance(model_input.attn_metadata,
# FlashAttentionMetadata), "Only FlashAttention backend is supported for now."
def test_lmcache_v0_connector_on_turing_meets_xformers(tmp_path):
    # 0.8.0 on a T4: the V1 oracle falls back to V0 (cc < 8.0), V0 falls back to XFormers
    result = _check(_model(tmp_path), "0.8.0", (7, 5), options={"kv_transfer_config": LMCACHE})
    f = finding(result, "SP-ATTN-012")
    assert (
        f.category == "attention_backend" and "Only FlashAttention backend is supported" in f.detail
    )


@pytest.mark.parametrize(
    "version, cc, options",
    [
        (
            "0.8.0",
            (8, 0),
            {"kv_transfer_config": LMCACHE},
        ),  # V0 (the oracle's --kv-transfer-config) on FlashAttention
        ("0.8.0", (7, 5), {}),  # no connector
        (
            "0.8.0",
            (7, 5),
            {"kv_transfer_config": '{"kv_connector":"PyNcclConnector","kv_role":"kv_both"}'},
        ),
    ],
)
def test_lmcache_neighbours_pass(tmp_path, version, cc, options):
    result = _check(_model(tmp_path), version, cc, options=options)
    assert "SP-ATTN-012" not in codes(result) and not _attention_unknowns(result)


def test_kv_transfer_config_with_v1_forced_in_080_is_refused(tmp_path):
    # vllm/engine/arg_utils.py@v0.8.0: VLLM_USE_V1=1 is not supported with --kv-transfer-config.
    result = _check(
        _model(tmp_path),
        "0.8.0",
        (8, 0),
        {"VLLM_USE_V1": "1"},
        options={"kv_transfer_config": LMCACHE},
    )
    assert (
        "VLLM_USE_V1=1 is not supported with --kv-transfer-config."
        in finding(result, "SP-V1-001").detail
    )
    later = _check(
        _model(tmp_path, "m2"),
        "0.8.5",
        (8, 0),
        {"VLLM_USE_V1": "1"},
        options={"kv_transfer_config": LMCACHE},
    )
    assert "SP-V1-001" not in codes(later)


# vllm/model_executor/model_loader/loader.py@v0.6.3 BitsAndBytesModelLoader._load_weights:
#   AttributeError: Model Qwen2ForCausalLM does not support BitsAndBytes quantization yet.
def test_qwen2_with_bitsandbytes_before_064_has_no_loader_mapping(tmp_path):
    path = _model(tmp_path, arch="Qwen2ForCausalLM", model_type="qwen2", quant=BNB)
    f = finding(_check(path, "0.6.3", (8, 6), memory=24 * GIB), "SP-QUANT-011")
    assert "Model Qwen2ForCausalLM does not support BitsAndBytes quantization yet." in f.detail
    assert f.remedies[0].args == {"upgrade": {"package": "vllm", "specifier": ">=0.6.4"}}


@pytest.mark.parametrize(
    "arch, model_type, version",
    [
        ("Qwen2ForCausalLM", "qwen2", "0.6.4"),  # Qwen2 gained bitsandbytes_stacked_params_mapping
        ("LlamaForCausalLM", "llama", "0.6.3"),  # mapped since the loader began
        ("Qwen2ForCausalLM", "qwen2", "0.6.5"),  # between reads whose lists differ: no claim
    ],
)
def test_bitsandbytes_model_class_neighbours(tmp_path, arch, model_type, version):
    path = _model(tmp_path, arch=arch, model_type=model_type, quant=BNB)
    assert "SP-QUANT-011" not in codes(_check(path, version, (8, 6), memory=24 * GIB))


def test_053_names_the_loader_class_in_its_message(tmp_path):
    # vllm/model_executor/model_loader/loader.py@v0.5.3 formats type(self).__name__
    path = _model(tmp_path, arch="Qwen2ForCausalLM", model_type="qwen2", quant=BNB)
    result = _check(path, "0.5.3", (8, 6), memory=24 * GIB, options={"enforce_eager": True})
    assert (
        "Model BitsAndBytesModelLoader does not support" in finding(result, "SP-QUANT-011").detail
    )


@pytest.mark.parametrize("head_dim, refused", [(80, True), (128, False)])
def test_072_v1_on_ampere_refuses_a_head_size_flash_attention_lacks(tmp_path, head_dim, refused):
    # vllm/v1/attention/backends/flash_attn.py@v0.7.2: V1 runs FlashAttention for every model
    result = _check(_model(tmp_path, head_dim=head_dim), "0.7.2", (8, 0), {"VLLM_USE_V1": "1"})
    assert ("SP-ATTN-011" in codes(result)) is refused
    assert not _attention_unknowns(result)


@pytest.mark.parametrize("steps, decided", [(8, False), (1, True)])
def test_an_oracle_feature_not_modelled_leaves_v1_or_v0_open(tmp_path, steps, decided):
    # --num-scheduler-steps > 1 sends 0.8.5 back to V0 (arg_utils.py@v0.8.5), where XFormers takes
    # head size 80; at its default 1 V1's FlashAttention refuses it
    result = _check(
        _model(tmp_path, head_dim=80), "0.8.5", (8, 0), options={"num_scheduler_steps": steps}
    )
    assert ("SP-ATTN-011" in codes(result)) is decided
    assert bool(_attention_unknowns(result)) is not decided
