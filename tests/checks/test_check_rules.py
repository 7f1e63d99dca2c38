"""One behaviour per rule, each on a checkpoint written into a tmp dir."""

from __future__ import annotations

import json
import socket

import pytest
from checkfixtures import GIB, codes, deployment, finding, gpus, kimi_like, llama_like, sparse_mla

from servepilot.checks import run_checks
from servepilot.hardware.cluster import Gpu


def test_tp_not_dividing_heads_is_an_error_with_working_sizes(tmp_path):
    # DeepSeek-R1-Distill-Qwen-7B: 28 heads, 4 KV heads
    path = llama_like(tmp_path / "m", heads=28, kv_heads=4, arch="Qwen2ForCausalLM", model_type="qwen2")
    result = run_checks(deployment(path, cc=(8, 0), n=8, memory=80 * GIB))
    f = finding(result, "SP-TP-001")
    assert f.severity == "error" and f.category == "tp_divisibility"
    assert "(28) must be divisible by tensor parallel size (8)" in f.detail
    # 7 divides the heads but not the 4 KV heads (vLLM needs tp % kv_heads == 0 above 4)
    assert f.remedies[0].args == {"set": {"tensor_parallel_size": 4}, "unset": []}


def test_tp_above_kv_heads_replicates(tmp_path):
    path = llama_like(tmp_path / "m", heads=32, kv_heads=4)
    f = finding(run_checks(deployment(path, cc=(9, 0), n=8, memory=80 * GIB)), "SP-TP-002")
    assert f.severity == "info" and "replicated 2x" in f.title


def test_tp_not_multiple_of_kv_heads(tmp_path):
    path = llama_like(tmp_path / "m", heads=48, kv_heads=8)
    f = finding(run_checks(deployment(path, cc=(9,
                                                0), n=6, memory=80 * GIB,
                                      options={"tensor_parallel_size": 6})), "SP-TP-002")
    assert f.severity == "error"


def test_max_model_len_beyond_derived(tmp_path):
    path = llama_like(tmp_path / "m", max_pos=8192)
    f = finding(run_checks(deployment(path, cc=(9,
                                                0), n=1, memory=80 * GIB,
                                      options={"max_model_len": 32768})), "SP-LEN-001")
    assert f.severity == "error" and "8,192" in f.title
    assert f.remedies[0].args == {"set": {"max_model_len": 8192}, "unset": []}


def test_max_model_len_allowed_by_env_is_a_warning(tmp_path):
    path = llama_like(tmp_path / "m", max_pos=8192)
    dep = deployment(path, cc=(9,
                               0), n=1, memory=80 * GIB, options={"max_model_len": 32768},
                     env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
    assert finding(run_checks(dep), "SP-LEN-001").severity == "warning"


def test_yarn_scaled_length_is_accepted(tmp_path):
    # 4096 original x yarn factor 64 = 262,144
    f = run_checks(deployment(kimi_like(tmp_path / "k"), version="0.18.0", options={"max_model_len": 262144}))
    assert "SP-LEN-001" not in codes(f)


def test_architecture_too_new_for_the_version(tmp_path):
    path = llama_like(tmp_path / "m", arch="Qwen3ForCausalLM", model_type="qwen3")
    assert "SP-ARCH-001" not in codes(run_checks(deployment(path, cc=(9, 0), n=1, version="0.10.0")))
    path2 = llama_like(tmp_path / "g", arch="GptOssForCausalLM", model_type="gpt_oss", heads=64, kv_heads=8)
    f = finding(run_checks(deployment(path2, cc=(9, 0), n=1, version="0.10.0")), "SP-ARCH-001")
    assert f.severity == "error" and f.category == "unsupported_arch"
    assert f.remedies[0].args == {"upgrade": {"package": "vllm", "specifier": ">=0.10.1"}}


def test_unknown_architecture_with_custom_code_needs_trust(tmp_path):
    path = llama_like(tmp_path / "m", arch="MyNewForCausalLM", model_type="my_new",
                      auto_map={"AutoConfig": "configuration_my.MyConfig",
                                "AutoModelForCausalLM": "modeling_my.MyModel"})
    result = run_checks(deployment(path, cc=(9, 0), n=1, version="0.16.0"))
    f = finding(result, "SP-CODE-001")
    assert f.severity == "error" and f.category == "remote_code"
    assert "modeling_my.py" in f.detail
    assert f.remedies[0].args == {"set": {"trust_remote_code": True}, "unset": []}
    assert finding(result, "SP-ARCH-001").severity == "warning"


def test_awq_below_min_capability(tmp_path):
    path = llama_like(tmp_path / "m", quant={"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"})
    f = finding(run_checks(deployment(path, cc=(7, 0), n=1, memory=32 * GIB)), "SP-QUANT-001")
    assert f.severity == "error" and "Minimum capability: 75. Current capability: 70." in f.detail


def test_awq_upgrades_to_marlin_on_ampere(tmp_path):
    path = llama_like(tmp_path / "m", quant={"quant_method": "awq", "bits": 4, "group_size": 128})
    result = run_checks(deployment(path, cc=(8, 6), n=1, memory=24 * GIB))
    assert result.resolved["quantization"] == "awq_marlin"
    assert "SP-QUANT-001" not in codes(result)


def test_fp8_on_ampere_falls_back_and_marlin_tiles(tmp_path):
    path = llama_like(tmp_path / "m", quant={"quant_method": "fp8",
                                             "activation_scheme": "static"}, intermediate=6448 * 2)
    result = run_checks(deployment(path, cc=(8, 6), n=2, memory=24 * GIB))
    assert finding(result, "SP-QUANT-002").severity == "warning"
    f = finding(result, "SP-QUANT-003")
    # the merged gate/up shard: 2 x (12896 / 2) (marlin_utils_fp8.py@v0.10.2)
    assert "size_n = 12896 is not divisible by tile_n_size = 64" in f.detail


def test_sparse_mla_on_sm120_has_no_backend(tmp_path):
    result = run_checks(deployment(sparse_mla(tmp_path / "v32"), version="0.16.0"))
    f = finding(result, "SP-ATTN-001")
    reasons = {c["backend"]: c["reasons"] for c in result.resolved["candidates"]}
    assert reasons["TRITON_MLA"] == ["sparse not supported"]
    assert reasons["FLASHMLA_SPARSE"] == ["compute capability not supported"]
    assert "FlashMLA Sparse is only supported on Hopper and Blackwell devices." in reasons["FLASHMLA"]
    assert any(r.kind == "hardware" for r in f.remedies)


def test_forced_backend_is_validated(tmp_path):
    result = run_checks(deployment(kimi_like(tmp_path / "k"), version="0.16.0",
                                   options={"attention_backend": "TRITON_MLA"}))
    f = finding(result, "SP-ATTN-001")
    assert ("Selected backend AttentionBackendEnum.TRITON_MLA is not valid for this configuration. "
            "Reason: ['kv_cache_dtype not supported']") in f.detail
    assert f.remedies[0].args == {"set": {}, "unset": ["attention_backend"]}


def test_env_backend_ignored_from_016(tmp_path):
    dep = deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=1, env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"})
    f = finding(run_checks(dep), "SP-ATTN-002")
    assert "silently ignored" in f.title
    assert run_checks(dep).resolved["attention_backend"] == "FLASH_ATTN"


def test_env_backend_honoured_on_014(tmp_path):
    dep = deployment(llama_like(tmp_path / "m"), cc=(9,
                                                     0), n=1, version="0.14.1",
                     env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"})
    result = run_checks(dep)
    assert result.resolved["attention_backend"] == "FLASHINFER"
    assert "deprecated" in finding(result, "SP-ATTN-002").title


def test_kv_dtype_not_in_version(tmp_path):
    dep = deployment(llama_like(tmp_path / "m"), cc=(9,
                                                     0), n=1, version="0.16.0", options={"kv_cache_dtype": "float16"})
    f = finding(run_checks(dep), "SP-KV-001")
    assert f.severity == "error" and f.category == "kv_cache_dtype"
    assert "SP-KV-001" not in codes(run_checks(deployment(llama_like(tmp_path / "n"), cc=(9,
                                                                                          0), n=1, version="0.18.0",
                                                          options={"kv_cache_dtype": "float16"})))


def test_fp8_kv_on_ampere(tmp_path):
    # 0.11 sends fp8 KV on non-Hopper GPUs to TRITON_ATTN, whose Triton kernel needs fp8e4nv (SM89+)
    dep = deployment(llama_like(tmp_path / "m"), cc=(8,
                                                     6), n=2, memory=24 * GIB, version="0.11.0",
                     options={"kv_cache_dtype": "fp8"})
    result = run_checks(dep)
    assert result.resolved["attention_backend"] == "TRITON_ATTN"
    f = finding(result, "SP-ATTN-001")
    assert "fp8e4nv" in f.detail and f.category == "kv_cache_dtype"
    # 0.16 validates backends in order: FLASH_ATTN refuses fp8 off Hopper, FLASHINFER takes it
    newer = run_checks(deployment(llama_like(tmp_path / "n"), cc=(8,
                                                                  6), n=2, memory=24 * GIB,
                                  options={"kv_cache_dtype": "fp8"}))
    assert newer.resolved["attention_backend"] == "FLASHINFER"
    assert "SP-ATTN-001" not in codes(newer)


def test_port_in_use_on_a_probed_machine(tmp_path):
    from dataclasses import replace

    from servepilot.hardware.host import probe_port

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        dep = deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=1, source="probe", options={"port": port})
        dep = replace(dep, host=probe_port(port, "127.0.0.1"))
        f = finding(run_checks(dep), "SP-PORT-001")
    assert f.severity == "error" and f.remedies[0].args == {"set": {"port": port + 1}, "unset": []}


def test_the_port_rule_only_reads_the_probed_facts(tmp_path):
    # Pure: facts say busy -> a finding, with no socket opened by the rule; no facts -> none.
    from dataclasses import replace

    from servepilot.hardware.host import HostFacts

    base = deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=1, source="flag", options={"port": 1})
    busy = replace(base, host=HostFacts(port=1, port_host="0.0.0.0", port_free=False))
    assert "SP-PORT-001" in codes(run_checks(busy))
    assert "SP-PORT-001" not in codes(run_checks(base))


def test_port_checked_with_flag_gpus_too(tmp_path):
    # --gpu describes the GPUs; the port is still this machine's (issue 17, item 4: a second
    # launch beside servepilot's own running server loaded for minutes, then died on bind).
    from servepilot.deployment import build_deployment

    model = llama_like(tmp_path / "m")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        dep = build_deployment(f"vllm serve {model} --port {port}", gpu="h100", engine_version="0.16.0")
        assert dep.cluster.source == "flag"
        assert "SP-PORT-001" in codes(run_checks(dep))
    ssh = build_deployment(f"ssh box vllm serve {model} --port {port}", gpu="h100", engine_version="0.16.0")
    assert ssh.host is None  # another machine's port is not this one's to probe


@pytest.mark.parametrize("shm,severity", [(64 * 2**20, "error"), (512 * 2**20, "warning"), (16 * GIB, None)])
def test_shm(tmp_path, shm, severity):
    result = run_checks(deployment(llama_like(tmp_path / "m"), cc=(9, 0), n=2, shm=shm))
    if severity is None:
        assert "SP-SHM-001" not in codes(result)
    else:
        assert finding(result, "SP-SHM-001").severity == severity


def test_mixed_gpus(tmp_path):
    mixed = gpus("h100", n=1,
                 cc=(9, 0)) + (Gpu(index=1, name="a100", key="a100", memory_bytes=80 * GIB, compute_capability=(8, 0)),)
    f = finding(run_checks(deployment(llama_like(tmp_path / "m"), gpu_list=mixed,
                                      options={"tensor_parallel_size": 2})), "SP-GPU-001")
    assert "h100" in f.title and "a100" in f.title


def test_torch_without_the_gpu_arch(tmp_path):
    dep = deployment(llama_like(tmp_path / "m"), cc=(12, 0), n=1, arch_list=("sm_80", "sm_86", "sm_90"))
    f = finding(run_checks(dep), "SP-CUDA-001")
    assert f.category == "cuda_driver_arch" and "sm_120" in f.title
    ok = deployment(llama_like(tmp_path / "n"), cc=(12, 0), n=1, arch_list=("sm_90", "sm_100", "sm_120"))
    assert "SP-CUDA-001" not in codes(run_checks(ok))


def test_nccl_proto_pinned(tmp_path):
    dep = deployment(llama_like(tmp_path / "m"), cc=(12, 0), n=2, topology="pcie", env={"NCCL_PROTO": "LL"})
    f = finding(run_checks(dep), "SP-NCCL-001")
    assert f.remedies[0].args == {"env": {"set": {}, "unset": ["NCCL_PROTO"]}}


def test_sm100_only_option_on_sm120(tmp_path):
    dep = deployment(llama_like(tmp_path / "m"), cc=(12,
                                                     0), n=1, version="0.20.0",
                     options={"moe_backend": "deep_gemm_mega_moe"})
    f = finding(run_checks(dep), "SP-GPU-002")
    assert "SM100" in f.detail


def test_expert_parallel_on_dense_model(tmp_path):
    f = finding(run_checks(deployment(llama_like(tmp_path / "m"), cc=(9,
                                                                      0), n=2,
                                      options={"tensor_parallel_size": 2,
                                               "enable_expert_parallel": True})), "SP-EP-001")
    assert f.severity == "warning"


def test_findings_are_sorted_errors_first(tmp_path):
    result = run_checks(deployment(kimi_like(tmp_path / "k"), version="0.16.0", options={"trust_remote_code": True},
                                   env={"NCCL_PROTO": "LL"}))
    order = [f.severity for f in result.findings]
    assert order == sorted(order, key=["error", "warning", "info"].index)


def test_known_model_type_with_auto_map_needs_no_trust(tmp_path):
    # DeepSeek-V3 ships auto_map, but transformers knows model_type deepseek_v3
    path = llama_like(tmp_path / "m", arch="DeepseekV3ForCausalLM", model_type="deepseek_v3",
                      auto_map={"AutoConfig": "configuration_deepseek.DeepseekV3Config"})
    assert "SP-CODE-001" not in codes(run_checks(deployment(path, cc=(9, 0), n=1)))


def test_internvl_chat_needs_trust(tmp_path):
    path = llama_like(tmp_path / "m", arch="InternVLChatModel", model_type="internvl_chat",
                      auto_map={"AutoConfig": "configuration_internvl_chat.InternVLChatConfig"})
    result = run_checks(deployment(path, cc=(9, 0), n=1))
    assert finding(result, "SP-CODE-001").severity == "error"
    assert "SP-ARCH-001" not in codes(result)  # the architecture itself is native


def test_missing_chat_template(tmp_path):
    path = llama_like(tmp_path / "m")
    (path / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    f = finding(run_checks(deployment(path, cc=(9, 0), n=1)), "SP-TMPL-001")
    assert f.severity == "warning" and f.category == "tokenizer_template"
    (path / "chat_template.jinja").write_text("{{ messages }}")
    assert "SP-TMPL-001" not in codes(run_checks(deployment(path, cc=(9, 0), n=1)))


def test_chat_template_flag_silences(tmp_path):
    path = llama_like(tmp_path / "m")
    (path / "tokenizer_config.json").write_text("{}")
    assert "SP-TMPL-001" not in codes(run_checks(deployment(path, cc=(9,
                                                                      0), n=1, options={"chat_template": "t.jinja"})))


def test_gptq_marlin_group_alignment(tmp_path):
    # intermediate 11008 / tp 4 = 2752: divisible by 64 and 128? 2752 % 128 = 64 -> refused
    path = llama_like(tmp_path / "m", quant={"quant_method": "gptq", "bits": 4, "group_size": 128,
                                             "desc_act": False}, intermediate=11008)
    result = run_checks(deployment(path, cc=(8, 6), n=4, memory=24 * GIB))
    assert result.resolved["quantization"] == "gptq_marlin"
    f = finding(result, "SP-QUANT-004")
    assert "input_size_per_partition = 2752 is not divisible by min_thread_k = 128" in f.detail
    assert f.remedies[0].args == {"set": {"tensor_parallel_size": 2}, "unset": []}
    ok = run_checks(deployment(llama_like(tmp_path / "n", quant={"quant_method": "gptq", "bits": 4,
                                                                 "group_size": 128}, intermediate=11008),
                               cc=(8, 6), n=2, memory=24 * GIB))
    assert "SP-QUANT-004" not in codes(ok)


def test_bfloat16_on_volta(tmp_path):
    path = llama_like(tmp_path / "m")
    auto = run_checks(deployment(path, cc=(7, 0), n=1, memory=32 * GIB))
    assert auto.resolved["model_dtype"] == "float16"
    assert finding(auto, "SP-DTYPE-001").severity == "info"
    forced = run_checks(deployment(path, cc=(7, 0), n=1, memory=32 * GIB, options={"dtype": "bfloat16"}))
    f = finding(forced, "SP-DTYPE-001")
    assert f.severity == "error" and f.remedies[0].args == {"set": {"dtype": "half"}, "unset": []}


@pytest.mark.parametrize(("version", "severity"), [("0.4.3", "error"), ("0.8.4", "error"), ("0.8.5", "warning"),
                                                  ("0.9.0", "info"), ("0.16.0", "info")])
def test_bfloat16_auto_on_volta_depends_on_the_release(tmp_path, version, severity):
    # before vllm-project/vllm#17265 --dtype auto kept bf16 and the worker refused it
    auto = run_checks(deployment(llama_like(tmp_path / "m"), cc=(7, 0), n=1, memory=32 * GIB, version=version))
    f = finding(auto, "SP-DTYPE-001")
    assert (f.severity, f.category) == (severity, "cuda_driver_arch")
    if severity != "info":
        assert f.remedies[0].args == {"set": {"dtype": "half"}, "unset": []}


def test_old_driver_for_blackwell(tmp_path):
    from dataclasses import replace

    dep = deployment(llama_like(tmp_path / "m"), cc=(12, 0), n=1)
    old = replace(dep, cluster=replace(dep.cluster, cuda_driver_version="12.4"))
    assert finding(run_checks(old), "SP-CUDA-002").category == "cuda_driver_arch"
    new = replace(dep, cluster=replace(dep.cluster, cuda_driver_version="12.8"))
    assert "SP-CUDA-002" not in codes(run_checks(new))


def test_first_error_is_the_one_the_engine_hits_first(tmp_path):
    # AWQ on a V100: vLLM refuses the quantization while building its config, before any
    # memory is profiled, so that error must come first even if memory would not fit either
    path = llama_like(tmp_path / "m", quant={"quant_method": "awq", "bits": 4, "group_size": 128}, max_pos=1_000_000)
    result = run_checks(deployment(path, cc=(7, 0), n=1, memory=16 * GIB))
    assert result.findings[0].code == "SP-QUANT-001"


def _chatglm_like(root, tokenizer_class, auto_tokenizer):
    path = llama_like(root, arch="ChatGLMModel", model_type="chatglm",
                      auto_map={"AutoConfig": "configuration_chatglm.ChatGLMConfig"})
    (path / "tokenizer_config.json").write_text(json.dumps({
        "auto_map": {"AutoTokenizer": auto_tokenizer}, "tokenizer_class": tokenizer_class, "chat_template": "{{ x }}"}))
    return path


@pytest.mark.parametrize("tokenizer_class, auto_tokenizer, trusted, expected", [
    ("ChatGLMTokenizer", ["tokenization_chatglm.ChatGLMTokenizer",
                          None], False, True),  # only the checkpoint defines it
    ("ChatGLMTokenizer", ["tokenization_chatglm.ChatGLMTokenizer", None], True, False),
    ("PreTrainedTokenizerFast", ["tokenization_chatglm.ChatGLMTokenizer", None], False, False),  # a transformers class
])
def test_tokenizer_defined_by_checkpoint_code_needs_trust(tmp_path, tokenizer_class, auto_tokenizer, trusted, expected):
    # vLLM reads model_type chatglm with its own config class, so only the tokenizer needs the flag
    path = _chatglm_like(tmp_path / "m", tokenizer_class, auto_tokenizer)
    options = {"trust_remote_code": True} if trusted else {}
    result = run_checks(deployment(path, cc=(9, 0), n=1, version="0.16.0", memory=80 * GIB, options=options))
    assert "SP-CODE-001" not in codes(result)
    assert ("SP-CODE-003" in codes(result)) is expected
    if expected:
        f = finding(result, "SP-CODE-003")
        assert f.severity == "error" and f.remedies[0].args == {"set": {"trust_remote_code": True}, "unset": []}
