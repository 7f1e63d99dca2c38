"""SGLang's attention backend choice worked out by hand from the sources, for the places where
one release differs from the next. 0.4.7 to 0.4.10, 0.5.8 and 0.5.11 have no golden file
(SGLang's own code was not run for them), so these cases are their only check.

Each expected answer was worked out by hand from that release's server_args.py
(_handle_attention_backend_compatibility, _handle_model_specific_adjustments), model_runner.py
and attention_registry.py, as the comment beside it says; they pin the places where one
release differs from the next.
"""

from __future__ import annotations

import pytest

from servepilot.engines.sglang import attention

SM80, SM90, SM100, SM110, SM120 = (8, 0), (9, 0), (10, 0), (11, 0), (12, 0)
MHA_SM100 = "TRTLLM MHA backend is only supported on Blackwell GPUs (SM100). Please use a different backend."
MLA_SM100 = "TRTLLM MLA backend is only supported on Blackwell GPUs (SM100). Please use a different backend."
FA3 = "FlashAttention v3 Backend requires SM>=80 and SM<=90. Please use `--attention-backend flashinfer`."


def _choose(version, cc, arch="LlamaForCausalLM", *, mla=False, backend=None, kv="auto", page=None):
    return attention.choose(version, cc, use_mla=mla, arch=arch, sparse=False, kv_cache_dtype=kv,
                            backend=backend, page_size=page)


# (version, cc, arch, mla, backend, kv) -> (backend SGLang runs, page size)
RUNS = [
    # 0.5.3 still picks in ModelRunner: fa3 on Hopper only for its fa3 architecture list
    ("0.5.3.post3", SM90, "Qwen2ForCausalLM", False, None, "auto", ("fa3", 1)),
    ("0.5.3", SM90, "Qwen3VLForConditionalGeneration", False, None, "auto", ("flashinfer", 1)),
    # 0.5.6 added Qwen3-VL to that list
    ("0.5.6", SM90, "Qwen3VLForConditionalGeneration", False, None, "auto", ("fa3", 1)),
    # before 0.5.6 no trtllm_mha default: FlashInfer on B200
    ("0.5.5.post3", SM100, "LlamaForCausalLM", False, None, "auto", ("flashinfer", 1)),
    # 0.5.7: trtllm_mha on SM100 only (page forced to 64), FlashInfer on SM120
    ("0.5.7", SM100, "LlamaForCausalLM", False, None, "auto", ("trtllm_mha", 64)),
    ("0.5.7", SM120, "LlamaForCausalLM", False, None, "auto", ("flashinfer", 1)),
    # 0.5.7 still needs the fa3 list on Hopper; 0.5.8 uses fa3 for every MHA model there
    ("0.5.7", SM90, "MistralForCausalLM", False, None, "auto", ("flashinfer", 1)),
    ("0.5.8", SM90, "MistralForCausalLM", False, None, "auto", ("fa3", 1)),
    # DeepSeek V3 on SM100 without a backend: trtllm_mla (ServerArgs' model-specific rule);
    # another MLA model gets FlashInfer there and triton on Ampere
    ("0.5.4", SM100, "DeepseekV3ForCausalLM", True, None, "auto", ("trtllm_mla", 64)),
    ("0.5.4", SM100, "DeepseekV2ForCausalLM", True, None, "auto", ("flashinfer", 1)),
    ("0.5.9", SM80, "DeepseekV2ForCausalLM", True, None, "auto", ("triton", 1)),
    # trtllm_mla accepted on SM120 from 0.5.4 (is_blackwell_supported = SM10x, SM12x) and on
    # SM110 from 0.5.9
    ("0.5.8.post1", SM120, "DeepseekV3ForCausalLM", True, "trtllm_mla", "auto", ("trtllm_mla", 64)),
    ("0.5.9", SM110, "DeepseekV3ForCausalLM", True, "trtllm_mla", "auto", ("trtllm_mla", 64)),
    # bf16 KV with trtllm_mla is accepted from 0.5.7
    ("0.5.7", SM100, "DeepseekV3ForCausalLM", True, "trtllm_mla", "bf16", ("trtllm_mla", 64)),
    # 0.4.7 to 0.5.2: ModelRunner picks; fa3 on Hopper only for the fa3 architecture list,
    # which gained Glm4Moe in 0.4.9; MLA models: FlashInfer on SM100 (no DeepSeek override yet)
    ("0.4.8.post1", SM90, "LlamaForCausalLM", False, None, "auto", ("fa3", 1)),
    ("0.4.8", SM90, "Glm4MoeForCausalLM", False, None, "auto", ("flashinfer", 1)),
    ("0.4.9", SM90, "Glm4MoeForCausalLM", False, None, "auto", ("fa3", 1)),
    ("0.4.10", SM100, "DeepseekV3ForCausalLM", True, None, "auto", ("flashinfer", 1)),
    ("0.4.7", SM80, "DeepseekV3ForCausalLM", True, None, "auto", ("triton", 1)),
    # 0.4.10's trtllm_mla: SM100, page 64, and no KV dtype check yet
    ("0.4.10.post2", SM100, "DeepseekV3ForCausalLM", True, "trtllm_mla", "fp8_e5m2",
     ("trtllm_mla", 64)),
    # 0.5.11 = 0.5.10 for these rules
    ("0.5.11", SM100, "LlamaForCausalLM", False, None, "auto", ("trtllm_mha", 64)),
]


@pytest.mark.parametrize("version,cc,arch,mla,backend,kv,want", RUNS)
def test_backend_the_release_runs(version, cc, arch, mla, backend, kv, want):
    got = _choose(version, cc, arch, mla=mla, backend=backend, kv=kv)
    assert got is not None and got.error is None, got
    assert (got.backend, got.page_size) == want
    assert "@v" in got.source


# (version, cc, arch, mla, backend, kv) -> (stage, SGLang's own text)
REFUSALS = [
    # 0.5.6's default for MHA models on any Blackwell is trtllm_mha, which its own check refuses
    # outside SM100: the plain launch fails on RTX 5090 / RTX PRO 6000
    ("0.5.6.post2", SM120, "LlamaForCausalLM", False, None, "auto", ("server_args", MHA_SM100)),
    # trtllm_mla on SM120: refused up to 0.5.3, accepted from 0.5.4
    ("0.5.3", SM120, "DeepseekV3ForCausalLM", True, "trtllm_mla", "auto", ("server_args", MLA_SM100)),
    # ... and on SM110 until 0.5.9
    ("0.5.8", SM110, "DeepseekV3ForCausalLM", True, "trtllm_mla", "auto", ("server_args", MLA_SM100)),
    # the KV dtypes trtllm_mla takes grew: fp4_e2m1 in 0.5.4, bf16 in 0.5.7
    ("0.5.3", SM100, "DeepseekV3ForCausalLM", True, "trtllm_mla", "fp8_e5m2",
     ("server_args", "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3 or auto.")),
    ("0.5.6", SM100, "DeepseekV3ForCausalLM", True, "trtllm_mla", "bf16",
     ("server_args", "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, "
                     "fp4_e2m1, or auto.")),
    # 0.5.3: ServerArgs sends DeepSeek V3 on SM100 to trtllm_mla before ModelRunner picks
    # anything, so trtllm_mla's KV check refuses an fp8_e5m2 cache although no backend was given
    ("0.5.3", SM100, "DeepseekV3ForCausalLM", True, None, "fp8_e5m2",
     ("server_args", "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3 or auto.")),
    ("0.4.10", SM120, "DeepseekV3ForCausalLM", True, "trtllm_mla", "auto", ("server_args", MLA_SM100)),
    ("0.4.10", SM100, "LlamaForCausalLM", False, "fa3", "auto", ("backend_init", FA3)),
    ("0.4.8", SM90, "DeepseekV3ForCausalLM", True, "torch_native", "auto",
     ("model_runner", "Invalid attention backend for MLA: torch_native")),
    # 0.5.3's ModelRunner still lists the backends an MLA model may use
    ("0.5.3", SM90, "DeepseekV3ForCausalLM", True, "torch_native", "auto",
     ("model_runner", "Invalid attention backend for MLA: torch_native")),
    # the registry's FA3 assert: no FA3 on Blackwell, nor for MLA on Ampere
    ("0.5.5", SM100, "LlamaForCausalLM", False, "fa3", "auto", ("backend_init", FA3)),
    ("0.5.9", SM80, "DeepseekV3ForCausalLM", True, "fa3", "auto", ("backend_init", FA3)),
    # trtllm_mha needs an MHA model
    ("0.5.7", SM100, "DeepseekV3ForCausalLM", True, "trtllm_mha", "auto",
     ("backend_init", "trtllm_mha backend can only be used with non-MLA models.")),
]


@pytest.mark.parametrize("version,cc,arch,mla,backend,kv,want", REFUSALS)
def test_refusal_with_the_release_text(version, cc, arch, mla, backend, kv, want):
    got = _choose(version, cc, arch, mla=mla, backend=backend, kv=kv)
    assert got is not None and got.backend is None, got
    assert (got.stage, got.error) == want


@pytest.mark.parametrize("version,backend,accepted", [
    ("0.4.9", "trtllm_mla", False), ("0.4.10", "trtllm_mla", True),
    ("0.4.8", "ascend", False), ("0.4.9", "ascend", True),
    ("0.4.10", "trtllm_mha", False), ("0.5.1", "trtllm_mha", True),
    ("0.5.1", "hybrid_linear_attn", False), ("0.5.2", "hybrid_linear_attn", True),
])
def test_argparse_choices_per_line(version, backend, accepted):
    got = _choose(version, SM100, "DeepseekV3ForCausalLM", mla=True, backend=backend)
    assert (got.stage != "argparse") is accepted, got


def test_intel_xpu_is_no_choice_before_0_5_4():
    got = _choose("0.5.3", SM90, backend="intel_xpu")
    assert got.stage == "argparse" and "invalid choice: 'intel_xpu'" in got.error
    assert _choose("0.5.4", SM90, backend="intel_xpu").stage != "argparse"


@pytest.mark.parametrize("version,arch", [
    ("0.5.4", "Olmo2ForCausalLM"),  # 0.5.4 sends Olmo2 to trtllm_mha/fa3/triton itself
    ("0.5.7", "Glm4MoeForCausalLM"),
    ("0.5.11", "Gemma4ForConditionalGeneration"),  # 0.5.11: Gemma 4 defaults to triton
    ("0.5.9", "Llama4ForConditionalGeneration"),
])
def test_model_specific_rules_are_not_guessed(version, arch):
    assert _choose(version, SM90, arch) is None


@pytest.mark.parametrize("version", ["0.3.6", "0.3.6.post3", "0.5.24", "0.6.0"])
def test_release_lines_not_read_are_not_modelled(version):
    assert not attention.modelled(version)
    assert _choose(version, SM90) is None


@pytest.mark.parametrize("version", ["0.4.0", "0.4.3.post4", "0.4.5.post3", "0.5.12",
                                     "0.5.18", "0.5.19", "0.5.23"])
def test_release_lines_read_are_modelled(version):
    assert attention.modelled(version)
    assert _choose(version, SM90) is not None


# --- 0.4.0 to 0.4.5 (sdists) ---------------------------------------------------------------

# (version, cc, arch, mla, backend, kv) -> (backend SGLang runs, page size)
RUNS_04 = [
    # 0.4.0-0.4.3: FlashInfer by default (ServerArgs), no fa3 yet, even on Hopper
    ("0.4.0", SM90, "LlamaForCausalLM", False, None, "auto", ("flashinfer", 1)),
    ("0.4.3.post4", SM90, "LlamaForCausalLM", False, None, "auto", ("flashinfer", 1)),
    # ... and ModelRunner puts every MLA model on triton, even when FlashInfer was named
    ("0.4.1", SM90, "DeepseekV3ForCausalLM", True, "flashinfer", "auto", ("triton", 1)),
    ("0.4.3", SM100, "DeepseekV3ForCausalLM", True, None, "auto", ("triton", 1)),
    # 0.4.4: ModelRunner picks; an MLA model keeps a backend it accepts (flashinfer, fa3, triton)
    ("0.4.4", SM90, "DeepseekV3ForCausalLM", True, "flashinfer", "auto", ("flashinfer", 1)),
    ("0.4.4.post4", SM90, "LlamaForCausalLM", False, None, "auto", ("flashinfer", 1)),
    ("0.4.4", SM100, "LlamaForCausalLM", False, "fa3", "auto", ("fa3", 1)),  # SM>=90 passes
    # 0.4.5: fa3 on Hopper for MLA models and its five fa3 architectures
    ("0.4.5", SM90, "MistralForCausalLM", False, None, "auto", ("fa3", 1)),
    ("0.4.5", SM90, "Qwen3ForCausalLM", False, None, "auto", ("flashinfer", 1)),
    ("0.4.5", SM90, "DeepseekV3ForCausalLM", True, None, "auto", ("fa3", 1)),
    ("0.4.5", SM80, "DeepseekV3ForCausalLM", True, None, "auto", ("triton", 1)),
    # ... with fp8_e5m2 fa3 becomes triton; flashmla forces page 64
    ("0.4.5", SM90, "DeepseekV3ForCausalLM", True, None, "fp8_e5m2", ("triton", 1)),
    ("0.4.5.post3", SM90, "DeepseekV3ForCausalLM", True, "flashmla", "auto", ("flashmla", 64)),
]


@pytest.mark.parametrize("version,cc,arch,mla,backend,kv,want", RUNS_04)
def test_0_4_0_to_0_4_5_backend_the_release_runs(version, cc, arch, mla, backend, kv, want):
    got = _choose(version, cc, arch, mla=mla, backend=backend, kv=kv)
    assert got is not None and got.error is None, got
    assert (got.backend, got.page_size) == want
    assert "@v0.4." in got.source


FA3_SM90 = "FlashAttention v3 Backend requires SM>=90. Please use `--attention-backend flashinfer`."
REFUSALS_04 = [
    # fa3 arrived in 0.4.4 and wants SM90 or newer
    ("0.4.4", SM80, "LlamaForCausalLM", False, "fa3", ("backend_init", FA3_SM90)),
    ("0.4.5.post3", (8, 9), "LlamaForCausalLM", False, "fa3", ("backend_init", FA3_SM90)),
    # before 0.4.4 fa3 is no choice at all; flashmla only from 0.4.5
    ("0.4.3", SM90, "LlamaForCausalLM", False, "fa3", ("argparse", None)),
    ("0.4.4", SM90, "DeepseekV3ForCausalLM", True, "flashmla", ("argparse", None)),
    # 0.4.4's ModelRunner: an MLA model on a backend outside its list
    ("0.4.4", SM90, "DeepseekV3ForCausalLM", True, "torch_native",
     ("model_runner", "Invalid attention backend for MLA: torch_native")),
]


@pytest.mark.parametrize("version,cc,arch,mla,backend,want", REFUSALS_04)
def test_0_4_0_to_0_4_5_refusals(version, cc, arch, mla, backend, want):
    got = _choose(version, cc, arch, mla=mla, backend=backend)
    assert got is not None and got.backend is None, got
    stage, text = want
    assert got.stage == stage
    assert text is None and "invalid choice" in got.error or got.error == text


# --- 0.5.12 to 0.5.23 (wheels; rules in server_args.py, then arg_groups/) -------------------

RUNS_NEW = [
    # the generic defaults hold to 0.5.23: fa3 on Hopper, trtllm_mha on SM100, FlashInfer else
    ("0.5.12.post1", SM90, "MistralForCausalLM", False, None, "auto", ("fa3", 1)),
    ("0.5.23", SM100, "LlamaForCausalLM", False, None, "auto", ("trtllm_mha", 64)),
    ("0.5.20", SM120, "LlamaForCausalLM", False, None, "auto", ("flashinfer", 1)),
    ("0.5.16", SM120, "DeepseekV2ForCausalLM", True, None, "auto", ("triton", 1)),
    ("0.5.21", SM100, "DeepseekV2ForCausalLM", True, None, "auto", ("flashinfer", 1)),
    # the DeepSeek family rule (arg_groups/model_overrides/deepseek_v2.py from 0.5.19)
    ("0.5.19", SM100, "KimiK25ForConditionalGeneration", True, None, "auto", ("trtllm_mla", 64)),
    # 0.5.19 lets trtllm_mha prefill on SM90 and SM120 (FMHAv2)
    ("0.5.19", SM120, "LlamaForCausalLM", False, "trtllm_mha", "auto", ("trtllm_mha", 64)),
    ("0.5.22", SM90, "LlamaForCausalLM", False, "trtllm_mha", "auto", ("trtllm_mha", 64)),
    # trtllm_mla keeps fp4_e2m1 up to 0.5.20 and bf16 throughout
    ("0.5.20", SM120, "DeepseekV3ForCausalLM", True, "trtllm_mla", "fp4_e2m1", ("trtllm_mla", 64)),
    ("0.5.23", SM120, "DeepseekV3ForCausalLM", True, "trtllm_mla", "bf16", ("trtllm_mla", 64)),
    # cutedsl_mla on SM100 with a bfloat16 cache; tokenspeed_mla with fp8_e4m3
    ("0.5.13", SM100, "DeepseekV3ForCausalLM", True, "cutedsl_mla", "bfloat16", ("cutedsl_mla", 64)),
    ("0.5.12", SM120, "DeepseekV3ForCausalLM", True, "tokenspeed_mla", "fp8_e4m3",
     ("tokenspeed_mla", 64)),
    # 0.5.17 keeps page 128 for trtllm_mha (16/32/64 before)
    ("0.5.17", SM100, "LlamaForCausalLM", False, "trtllm_mha", "auto", ("trtllm_mha", 64)),
]


@pytest.mark.parametrize("version,cc,arch,mla,backend,kv,want", RUNS_NEW)
def test_0_5_12_to_0_5_23_backend_the_release_runs(version, cc, arch, mla, backend, kv, want):
    got = _choose(version, cc, arch, mla=mla, backend=backend, kv=kv)
    assert got is not None and got.error is None, got
    assert (got.backend, got.page_size) == want


@pytest.mark.parametrize("version,page,want", [("0.5.16", 128, 64), ("0.5.17", 128, 128)])
def test_trtllm_mha_page_128_kept_from_0_5_17(version, page, want):
    got = _choose(version, SM100, backend="trtllm_mha", page=page)
    assert got.backend == "trtllm_mha" and got.page_size == want


MHA_PREFILL_SM100 = ("TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100). "
                     "Please use a different prefill backend.")
MHA_PREFILL_0519 = ("TRTLLM MHA backend for prefill requires Hopper (SM90), Blackwell (SM100), or "
                    "SM120 GPUs. Please use a different prefill backend.")
MLA_BLACKWELL = ("TRTLLM MLA backend is only supported on Blackwell GPUs (SM100/SM12x). "
                 "Please use a different backend.")
CUTEDSL_SM100 = ("CuteDSL MLA backend is only supported on Blackwell GPUs (SM100). "
                 "Please use a different backend.")
REFUSALS_NEW = [
    # (version, cc, arch, mla, backend, kv) -> (stage, category, text)
    ("0.5.18", SM120, "LlamaForCausalLM", False, "trtllm_mha", "auto",
     ("server_args", "attention_backend", MHA_PREFILL_SM100)),
    ("0.5.19", SM80, "LlamaForCausalLM", False, "trtllm_mha", "auto",
     ("server_args", "attention_backend", MHA_PREFILL_0519)),
    ("0.5.19", SM120, "LlamaForCausalLM", False, "trtllm_mha", "fp8_e4m3",
     ("server_args", "kv_cache_dtype",
      "TRTLLM FMHAv2 prefill on SM120 does not support fp8_e4m3 KV cache or skip-softmax.")),
    ("0.5.15", SM90, "DeepseekV3ForCausalLM", True, "trtllm_mla", "auto",
     ("server_args", "attention_backend", MLA_BLACKWELL)),
    ("0.5.21", SM120, "DeepseekV3ForCausalLM", True, "trtllm_mla", "fp4_e2m1",
     ("server_args", "kv_cache_dtype",
      "TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto.")),
    ("0.5.23", SM120, "DeepseekV3ForCausalLM", True, "cutedsl_mla", "auto",
     ("server_args", "attention_backend", CUTEDSL_SM100)),
    ("0.5.14", SM100, "DeepseekV3ForCausalLM", True, "cutedsl_mla", "fp8_e5m2",
     ("server_args", "kv_cache_dtype",
      "CuteDSL MLA backend only supports kv-cache-dtype of fp8_e4m3, bf16, or auto.")),
    ("0.5.14", SM100, "DeepseekV3ForCausalLM", True, "tokenspeed_mla", "auto",
     ("server_args", "kv_cache_dtype",
      "tokenspeed_mla backend requires kv-cache-dtype=fp8_e4m3, got auto.")),
    ("0.5.22", SM90, "DeepseekV3ForCausalLM", True, "tokenspeed_mla", "fp8_e4m3",
     ("server_args", "attention_backend",
      "tokenspeed_mla backend is only supported on Blackwell GPUs (SM100/SM12x).")),
    # 0.5.23 reads tokenspeed_mla as cutedsl_mla: SM100 only, and it sets fp8_e4m3 itself
    ("0.5.23", SM120, "DeepseekV3ForCausalLM", True, "tokenspeed_mla", "auto",
     ("server_args", "attention_backend", CUTEDSL_SM100)),
    ("0.5.20", SM100, "LlamaForCausalLM", False, "cutedsl_mla", "auto",
     ("backend_init", "attention_backend", "cutedsl_mla backend can only be used with MLA models.")),
    ("0.5.23", SM100, "LlamaForCausalLM", False, "fa3", "auto", ("backend_init", "attention_backend", FA3)),
    ("0.5.18", SM90, "DeepseekV3ForCausalLM", True, "hpc_ops", "auto",
     ("backend_init", "attention_backend", "hpc_ops backend can only be used with non-MLA models.")),
    # 0.5.20 dropped cutlass_mla from the choices
    ("0.5.20", SM100, "DeepseekV3ForCausalLM", True, "cutlass_mla", "auto",
     ("argparse", "attention_backend", None)),
]


@pytest.mark.parametrize("version,cc,arch,mla,backend,kv,want", REFUSALS_NEW)
def test_0_5_12_to_0_5_23_refusals(version, cc, arch, mla, backend, kv, want):
    got = _choose(version, cc, arch, mla=mla, backend=backend, kv=kv)
    assert got is not None and got.backend is None, got
    stage, category, text = want
    assert (got.stage, got.category) == (stage, category)
    assert text is None and "invalid choice" in got.error or got.error == text
    assert "@v0.5.1" in got.source or "@v0.5.2" in got.source


@pytest.mark.parametrize("version,backend,accepted", [
    ("0.5.19", "cutlass_mla", True), ("0.5.20", "cutlass_mla", False),
    ("0.5.12", "cutedsl_mla", False), ("0.5.13", "cutedsl_mla", True),
    ("0.5.16", "hpc_ops", False), ("0.5.17", "hpc_ops", True),
])
def test_argparse_choices_after_0_5_11(version, backend, accepted):
    got = _choose(version, SM100, "DeepseekV3ForCausalLM", mla=True, backend=backend)
    assert got is None or (got.stage != "argparse") is accepted, got


@pytest.mark.parametrize("version,arch", [
    ("0.5.12", "DeepseekV4ForCausalLM"),  # named by 0.5.12's model-specific rules
    ("0.5.16", "LongcatFlashForCausalLM"),  # registered in arg_groups/overrides.py
    ("0.5.20", "Glm5NextForConditionalGeneration"),  # arg_groups/model_overrides/
    ("0.5.23", "Gemma2ForCausalLM"),  # named by 0.5.11-0.5.14, moved later: still not guessed
    ("0.5.21", "Llama4ForConditionalGeneration"),
])
def test_model_specific_rules_after_0_5_11_are_not_guessed(version, arch):
    assert _choose(version, SM90, arch) is None


@pytest.mark.parametrize("version,asymmetric,want", [
    # 0.5.17: unequal K/V head dims on SM100 get fa4 (page 128 for MHA there), not trtllm_mha
    ("0.5.17", True, ("fa4", 128)),
    ("0.5.17", False, ("trtllm_mha", 64)),
    ("0.5.16", True, ("trtllm_mha", 64)),
])
def test_asymmetric_kv_mha_on_sm100_from_0_5_17(version, asymmetric, want):
    got = attention.choose(version, SM100, use_mla=False, arch="LlamaForCausalLM", sparse=False,
                           kv_cache_dtype="auto", backend=None, page_size=None,
                           asymmetric_kv=asymmetric)
    assert (got.backend, got.page_size) == want


@pytest.mark.parametrize("version,cc,mla,want", [
    ("0.5.15", SM100, False, 128),  # fa4 named: page 128 for MHA on SM100 from 0.5.15
    ("0.5.14", SM100, False, 1),  # ... only as --prefill-attention-backend before
    ("0.5.15", SM120, False, 1),
    ("0.5.23", SM100, True, 1),
])
def test_fa4_page_size(version, cc, mla, want):
    arch = "DeepseekV2ForCausalLM" if mla else "LlamaForCausalLM"
    got = _choose(version, cc, arch, mla=mla, backend="fa4")
    assert got.backend == "fa4" and got.page_size == want


WINDOW = ("Window attention is not supported in the triton attention backend. "
          "Please use `--attention-backend flashinfer`.")


@pytest.mark.parametrize("version,arch,backend,kv,refused", [
    ("0.4.2", "Gemma2ForCausalLM", "triton", "auto", True),
    ("0.4.2", "LlamaForCausalLM", "triton", "auto", False),
    ("0.4.4", "Gemma3ForCausalLM", "triton", "auto", False),  # Gemma 3 reports a window from 0.4.5
    ("0.4.6.post5", "Gemma3ForConditionalGeneration", "triton", "auto", True),
    ("0.4.7", "Gemma2ForCausalLM", "triton", "auto", False),  # 0.4.7's triton handles windows
    # 0.4.5: Gemma 2 on Hopper defaults to fa3, which an fp8_e5m2 cache turns into triton
    ("0.4.5", "Gemma2ForCausalLM", None, "fp8_e5m2", True),
    ("0.4.5", "Gemma2ForCausalLM", None, "auto", False),
])
def test_triton_refuses_sliding_window_models_up_to_0_4_6(version, arch, backend, kv, refused):
    got = _choose(version, SM90, arch, backend=backend, kv=kv)
    assert got is not None
    assert (got.error == WINDOW) is refused, got
    if refused:
        assert got.stage == "backend_init" and got.category == "attention_backend"
