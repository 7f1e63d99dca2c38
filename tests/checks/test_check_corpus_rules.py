"""Rules added from launch failures of the corpus, each an engine fact with its release range:
a pre-quantized bitsandbytes checkpoint with tensor parallel (SP-QUANT-005), FlexAttention's
sliding-window refusal on vLLM 0.10.2 (SP-ATTN-001), forced FlashInfer on the V0 engine below
compute capability 8.0 (SP-ATTN-008)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from checkfixtures import GIB, codes, deployment, finding, llama_like

from servepilot.checks import run_checks

BNB = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}


@pytest.mark.parametrize("version, tp, refused", [
    ("0.7.3", 8, True),
    ("0.11.0", 2, True),
    ("0.27.0", 2, True),
    ("0.7.3", 1, False),  # one GPU: the loader keeps whole tensors
    ("0.7.2", 8, False),  # before the first release read: no claim
    ("0.28.0", 2, False),  # no bitsandbytes loader left to refuse
])
def test_prequantized_bitsandbytes_refuses_tensor_parallel(tmp_path, version, tp, refused):
    path = llama_like(tmp_path / "m", quant=BNB)
    result = run_checks(deployment(path, cc=(8, 9), n=tp, version=version, memory=24 * GIB))
    assert ("SP-QUANT-005" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-QUANT-005")
        assert f.category == "quantization_support" and f.severity == "error"
        assert "Prequant BitsAndBytes models with tensor parallelism is not supported" in f.detail
        assert f.remedies[0].args["set"] == {"tensor_parallel_size": 1, "pipeline_parallel_size": tp}


def test_a_16_bit_checkpoint_quantized_while_loading_splits_over_tensor_parallel(tmp_path):
    path = llama_like(tmp_path / "m")
    dep = deployment(path, cc=(8, 9), n=2, version="0.7.3", memory=24 * GIB,
                     options={"quantization": "bitsandbytes", "load_format": "bitsandbytes"})
    assert "SP-QUANT-005" not in codes(run_checks(dep))


def test_pipeline_parallel_clears_the_bitsandbytes_refusal(tmp_path):
    dep = deployment(llama_like(tmp_path / "m", quant=BNB), cc=(8, 9), n=4, version="0.7.3", memory=24 * GIB)
    f = finding(run_checks(dep), "SP-QUANT-005")
    opts = {**dep.launch.options, **f.remedies[0].args["set"]}
    fixed = dataclasses.replace(dep, launch=dataclasses.replace(dep.launch, options=opts))
    assert "SP-QUANT-005" not in codes(run_checks(fixed))


def _windowed(tmp_path, window: int | None):
    path = llama_like(tmp_path / "m", arch="MistralForCausalLM", model_type="mistral", dtype="float16")
    cfg = json.loads((path / "config.json").read_text())
    cfg["sliding_window"] = window
    (path / "config.json").write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("version, cc, window, refused", [
    ("0.10.2", (7, 5), 4096, True),  # FlexAttention is the V1 default below 8.0 and refuses windows
    ("0.10.2", (7, 5), None, False),  # no window: FlexAttention serves it
    ("0.10.2", (8, 6), 4096, False),  # FlashAttention on Ampere takes windows
    ("0.11.0", (7, 5), 4096, False),  # 0.11's FlexAttention has no such raise
])
def test_flex_attention_refuses_sliding_window_in_0102(tmp_path, version, cc, window, refused):
    result = run_checks(deployment(_windowed(tmp_path, window), cc=cc, n=1, version=version, memory=24 * GIB))
    found = [f for f in result.findings if f.code == "SP-ATTN-001"]
    assert bool(found) is refused
    if refused:
        assert found[0].category == "attention_backend"
        assert "FlexAttention does not support sliding window yet." in found[0].detail
        assert found[0].title.startswith("FLEX_ATTENTION cannot serve this model's attention")


@pytest.mark.parametrize("version, cc, env, refused", [
    ("0.7.2", (7, 5), {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, True),  # Turing: FA2 raises in profiling
    ("0.5.3", (7, 0), {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, True),
    ("0.10.1", (7, 5), {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, True),  # V1 falls back to V0 below 8.0
    ("0.7.2", (8, 6), {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, False),  # Ampere runs FA2
    ("0.7.2", (7, 5), {}, False),  # vLLM's own choice (XFormers)
    ("0.7.2", (7, 5), {"VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_USE_V1": "1"}, False),
    ("0.8.5", (7, 5), {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, False),  # not read: no claim
    ("0.10.2", (7, 5), {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, False),  # no V0 FlashInfer left
])
def test_forced_flashinfer_on_v0_needs_flash_attention_2(tmp_path, version, cc, env, refused):
    path = llama_like(tmp_path / "m", dtype="float16")
    result = run_checks(deployment(path, cc=cc, n=1, version=version, env=env, memory=24 * GIB))
    assert ("SP-ATTN-008" in codes(result)) is refused
    if refused:
        f = finding(result, "SP-ATTN-008")
        assert "FlashAttention only supports Ampere GPUs or newer." in f.detail
        assert f.remedies[0].args["env"]["unset"] == ["VLLM_ATTENTION_BACKEND"]


def _sglang_mla(tmp_path, version, **options):
    from checkfixtures import MLA_TEXT, _write

    root = tmp_path / "mla"
    root.mkdir(parents=True, exist_ok=True)
    _write(root, "config.json", MLA_TEXT)
    return deployment(root, cc=(9, 0), n=8, version=version, engine="sglang", memory=80 * GIB,
                      options={"tp_size": 8, **options})


def _weights_per_gpu(dep) -> int:
    return run_checks(dep).plan["weights_per_gpu_bytes"]


def test_sglang_043_dp_attention_holds_the_mla_attention_whole_on_every_rank(tmp_path):
    plain = _weights_per_gpu(_sglang_mla(tmp_path, "0.4.3"))
    dp = run_checks(_sglang_mla(tmp_path, "0.4.3", enable_dp_attention=True))
    # 61 layers of 64-head MLA projections (~6.2 B parameters, ~12 GiB in bf16) and the
    # embedding now whole on every rank instead of an eighth: about 7/8 of that more per GPU
    assert 9 * GIB < dp.plan["weights_per_gpu_bytes"] - plain < 13 * GIB
    assert any("dp_size = tp_size" in n for n in dp.memory_plan.notes)
    assert any("deepseek_v2.py@v0.4.3" in s for s in dp.memory_plan.sources)


def test_later_dp_attention_splits_the_attention_over_tp_over_dp(tmp_path):
    plain = _weights_per_gpu(_sglang_mla(tmp_path, "0.5.2"))
    whole = _weights_per_gpu(_sglang_mla(tmp_path, "0.5.2", enable_dp_attention=True, dp_size=8))
    halves = _weights_per_gpu(_sglang_mla(tmp_path, "0.5.2", enable_dp_attention=True, dp_size=4))
    assert plain < halves < whole


def test_dp_attention_where_the_layout_was_not_read_splits_as_before(tmp_path):
    plain = _weights_per_gpu(_sglang_mla(tmp_path, "0.5.13"))
    assert _weights_per_gpu(_sglang_mla(tmp_path, "0.5.13", enable_dp_attention=True, dp_size=8)) == plain


@pytest.mark.parametrize("version, cc, refused", [
    ("0.4.9.post2", (12, 0), True),  # pins torch 2.7.1, PyPI's CUDA 12.6 build: no Blackwell
    ("0.4.5.post3", (10, 0), True),  # torch 2.6.0, CUDA 12.4
    ("0.4.9.post2", (9, 0), False),
    ("0.5.1.post3", (12, 0), False),  # torch 2.8.0, CUDA 12.8
])
def test_sglang_before_05_default_install_has_no_blackwell_kernels(tmp_path, version, cc, refused):
    dep = deployment(llama_like(tmp_path / "m"), cc=cc, n=1, version=version, engine="sglang", memory=32 * GIB,
                     options={"tp_size": 1})
    found = [f for f in run_checks(dep).findings if f.code == "SP-CUDA-003" and f.severity == "error"]
    assert bool(found) is refused
    if refused:
        assert "pinned torch" in found[0].title and found[0].category == "cuda_driver_arch"


def test_fbgemm_fp8_keeps_the_modules_it_does_not_convert_in_16_bits(tmp_path):
    from servepilot.checkpoint.inspect import inspect_path

    def spec(name, skipped):
        quant = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0, "modules_to_not_convert": skipped}
        path = llama_like(tmp_path / name, quant=quant)
        (path / "model.safetensors.index.json").unlink()  # sizes from the architecture, per module
        return inspect_path(path)

    attention = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(32) for p in "qkvo"]
    all_fp8, kept = spec("a", ["lm_head"]), spec("b", attention + ["lm_head"])
    assert kept.quant.method == "fbgemm_fp8" and len(kept.quant.ignore) == 129
    # 32 layers of 4096x(4096+1024+1024+4096) attention: one more byte per parameter in 16 bits
    extra = kept.weights.total_bytes - all_fp8.weights.total_bytes
    assert abs(extra - 32 * 4096 * 10240) < 0.01 * extra


@pytest.mark.parametrize("version, kv, refused", [
    ("0.10.1", "fp8", True),  # FlashMLA's V1 Impl refuses a quantized KV cache
    ("0.10.0", "fp8", True),
    ("0.10.1", "auto", False),
    ("0.10.2", "fp8", False),  # the raise is gone
])
def test_flashmla_v1_refuses_an_fp8_kv_cache_before_0102(tmp_path, version, kv, refused):
    from checkfixtures import MLA_TEXT, _write

    root = tmp_path / "mla"
    root.mkdir()
    _write(root, "config.json", MLA_TEXT)
    dep = deployment(root, cc=(9, 0), n=8, version=version, memory=141 * GIB, options={"kv_cache_dtype": kv})
    found = [f for f in run_checks(dep).findings if f.code == "SP-ATTN-001"]
    assert bool(found) is refused
    if refused:
        assert found[0].category == "kv_cache_dtype"
        assert "FlashMLA V1 with FP8 KV cache not yet supported" in found[0].detail
