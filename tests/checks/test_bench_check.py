"""The corpus bench's row readers: eras, GPU texts, command forms, family guesses (no shared/ files)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_check as bench  # noqa: E402
import modelzoo  # noqa: E402


@pytest.mark.parametrize("row, version", [
    ({"engine": "vllm", "id": "vllm-4202-x", "source_url": None}, "0.4.0.post1"),
    ({"engine": "vllm", "id": "x", "source_url": "https://github.com/vllm-project/vllm/issues/16901"}, "0.8.4"),
    ({"engine": "vllm", "id": "x", "source_url": "https://github.com/vllm-project/vllm/issues/31936"}, "0.13.0"),
    ({"engine": "vllm", "id": "qwen-16-x", "source_url": "https://github.com/QwenLM/Qwen/issues/16"}, None),
    ({"engine": "sglang", "id": "sglang-5883-x", "source_url": None}, "0.4.6"),
    ({"engine": "sglang", "id": "x",
      "source_url": "https://github.com/sgl-project/sglang/issues/33000"}, "0.5.17"),
])
def test_era_from_the_issue_number(row, version):
    assert bench.era_version(row) == version


def test_row_version_then_image_tag_then_era():
    assert bench.engine_version({"engine": "vllm",
                                 "engine_version": "v0.10.1.dev101+gbda9d0535"}) == ("0.10.1.dev101", "row")
    row = {"engine": "vllm", "engine_version": None, "flags": "docker run vllm/vllm-openai:v0.7.3 --model m",
           "id": "vllm-19542-x"}
    assert bench.engine_version(row) == ("0.7.3", "image tag")


@pytest.mark.parametrize("text, count", [
    ("NVIDIA RTX PRO 6000 Blackwell x8 (SM120), TP=8 + EP", 8), ("8xA100-PCIE-40GB", 8), ("A100 80GB x2", 2),
    ("3x V100 32G", 3), ("8 GPUs (tensor_parallel_size=8)", 8), ("two GPUs", 2), ("NVIDIA RTX 3090", None),
])
def test_gpu_counts(text, count):
    assert bench.gpu_count(text) == count


@pytest.mark.parametrize("text, key", [
    ("NVIDIA RTX PRO 6000 Blackwell x8 (SM120)", "rtx-pro-6000-blackwell-workstation"),
    ("8xA100-PCIE-40GB", "a100-pcie-40gb"), ("NVIDIA H20 x8", "h20"), ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ("NVIDIA GeForce RTX 2060 (6 GB)", "rtx-2060"), ("NVIDIA Quadro RTX 6000", "quadro-rtx-6000"),
    ("2x RTX 4080 Super", "rtx-4080-super"), ("RTX 4070 Ti", "rtx-4070-ti"),
])
def test_catalog_names(text, key):
    assert bench.catalog_gpu(text).key == key


def test_older_gpus_from_the_catalog_and_capability_only_gpus():
    flag, how = bench.gpu_setup({"gpu": "2x Tesla P100-PCIE-16GB"}, tp=1)
    assert flag == "tesla-p100-pcie-16gbx2" and "catalog" in how
    flag, how = bench.gpu_setup({"gpu": "4 X GPU (A800: 79GB)"}, tp=1)
    assert flag == "a800-sxm-80gbx4"
    flag, how = bench.gpu_setup({"gpu": "GPU with compute capability 7.5"}, tp=1)
    assert flag == "t4x1" and "proxy" in how


def test_commands_from_docker_kwargs_and_fragments(tmp_path):
    argvs, form = bench.command_for(
        {
            "engine": "vllm",
            "gpu": None,
            "flags": "docker run --gpus all -e VLLM_USE_FLASH_ATTN=0 vllm/vllm-openai:latest --model "
                     "Qwen/Qwen3-4B-AWQ --max-model-len 4096",
        },
        tmp_path,
    )
    assert form == "command line" and argvs[0][:3] == ["VLLM_USE_FLASH_ATTN=0", "vllm",
                                                       "serve"] and argvs[0][-2:] == ["--max-model-len", "4096"]
    argvs, form = bench.command_for({"engine": "vllm", "gpu": None,
                                     "flags": "tensor_parallel_size=3, dtype='half'"}, tmp_path)
    assert form == "python kwargs" and "--tensor-parallel-size" in argvs[0] and "half" in argvs[0]
    argvs, _ = bench.command_for({"engine": "vllm", "gpu": "H100 (TP=8)", "flags": None}, tmp_path)
    assert argvs[0][-2:] == ["--tensor-parallel-size", "8"]


def test_family_guess_takes_the_nearest_size_of_the_family():
    assert bench.family_guess("Qwen1.5-14B") == "Qwen/Qwen2.5-14B"
    assert bench.family_guess("LLaMA-2-13B-chat").lower().startswith("meta-llama/llama-2-13b")
    assert bench.family_guess("Falcon-40B") is None


@pytest.mark.parametrize("flags, shm", [
    ("docker run --gpus all vllm/vllm-openai:latest --model m --tensor-parallel-size 2", 64 * 2**20),
    ("docker run --gpus all --shm-size=16g vllm/vllm-openai:latest --model m", 16 * 2**30),
    ("docker run --gpus all --ipc=host vllm/vllm-openai:latest --model m", None),
    ("vllm serve m --tensor-parallel-size 2", None),
])
def test_container_shm_from_the_docker_line(flags, shm):
    assert bench.container_shm(flags) == shm


@pytest.mark.parametrize("name, heads, kv", [
    ("cognitivecomputations/WizardLM-33B-V1.0-Uncensored", 52, 52), ("Qwen/Qwen2-57B-A14B-Instruct", 28, 4),
    ("deepseek-ai/DeepSeek-V2-Chat", 128, 128), ("microsoft/Phi-3-vision-128k-instruct", 32, 32)])
def test_zoo_families_keep_their_published_head_counts(name, heads, kv):
    cfg = modelzoo.config_for(name)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (heads, kv)


def test_zoo_custom_code_families_name_their_code():
    assert modelzoo.config_for("THUDM/chatglm3-6b")["auto_map"]["AutoConfig"].startswith("configuration_chatglm")
    assert modelzoo.config_for("MiniMax-M2")["quantization_config"]["weight_block_size"] == [128, 128]


def test_gguf_rebuild_reads_the_shapes_of_a_nested_text_config(tmp_path):
    # Llama-4 and Gemma-3 keep hidden_size & co. in text_config (corpus row llama-cpp-python-1994
    # crashed the bench with KeyError 'hidden_size' when the GGUF writer read the outer config)
    gguf = pytest.importorskip("gguf")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    text = {"hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
            "num_key_value_heads": 8, "intermediate_size": 8192}
    (ckpt / "config.json").write_text(
        __import__("json").dumps({"architectures": ["Llama4ForConditionalGeneration"], "text_config": text}))
    reader = gguf.GGUFReader(str(bench.write_gguf(ckpt)))
    # the architecture llama.cpp's converter writes for Llama4ForConditionalGeneration
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama4"
    field = reader.fields["llama4.embedding_length"]
    assert int(field.parts[field.data[0]][0]) == 5120


def test_gguf_rebuild_of_a_class_the_converter_does_not_register_stays_llama(tmp_path):
    gguf = pytest.importorskip("gguf")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(__import__("json").dumps({
        "architectures": ["NoSuchModelForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4}))
    arch = gguf.GGUFReader(str(bench.write_gguf(ckpt))).fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"


def test_gguf_rebuild_without_shapes_is_a_skip_not_a_crash(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"architectures": ["X"]}')
    with pytest.raises(bench.RowNotBuildable, match="hidden_size"):
        bench.write_gguf(ckpt)


@pytest.mark.parametrize("text, build", [
    ("5061 (916c83bf)", "5061"), ("b6428", "6428"), ("9464 (5dcb71166)", "9464"),
    ("2024-07 build (HIP)", None), ("llama-cpp-python 0.3.8", None),
    ("master (2025-08, Vulkan)", None), ("LM Studio 0.2.24", None),
])
def test_llamacpp_versions_are_build_numbers(text, build):
    """A llama.cpp row's version is its build number; a date or a wrapper's version is none."""
    row = {"engine": "llama.cpp", "engine_version": text, "id": "llama.cpp-1-x"}
    version, how = bench.engine_version(row)
    assert version == build and (("build" in how) == (build is not None))


def test_example_skeletons_make_no_chat_template_claim(tmp_path):
    """examples/deepseek-v3 elides the published template: the rebuilt checkpoint drops the file
    rather than let check report a missing template the real checkpoint has."""
    path = bench.write_model(tmp_path, "row", {"zoo": "deepseek-ai/DeepSeek-V3"}, "vllm")
    assert (path / "config.json").is_file() and not (path / "tokenizer_config.json").exists()
    kept = bench.write_model(tmp_path, "row2", {"zoo": "THUDM/chatglm3-6b"}, "vllm")
    assert "chat_template" in json.loads((kept / "tokenizer_config.json").read_text())


def test_qwens_own_qwen3_fp8_releases_are_block_quantized():
    """Qwen/Qwen3-*-FP8 ship 128x128 FP8 blocks; other producers' FP8 names stay per-tensor here."""
    assert modelzoo.quantization_for("Qwen/Qwen3-30B-A3B-FP8")["weight_block_size"] == [128, 128]
    assert "weight_block_size" not in modelzoo.quantization_for("RedHatAI/Qwen3-8B-FP8-dynamic")
    llama = modelzoo.quantization_for("meta-llama/Llama-3.1-8B-Instruct-FP8")
    assert "weight_block_size" not in llama


def test_a_model_described_as_a_likeness_is_not_rebuilt_from_the_named_one():
    files, how = bench.model_files({"model": "Qwen3-0.6B-class hybrid GDN model (verl example)"})
    built = {"model": how, "gpu": "catalog b300", "version": "0.5.17 (row)"}
    assert how.startswith("family guess")
    assert not bench.rebuildable({"category": "attention_backend"}, built)
    named = bench.model_files({"model": "Qwen/Qwen3-0.6B"})[1]
    assert named.startswith(("modelzoo", "published config"))


@pytest.mark.parametrize("text, gpu, how", [
    ("MI300X", "mi300xx1", "catalog mi300x"),
    ("8x AMD Instinct MI300X", "mi300xx8", "catalog mi300x"),
    ("AMD Instinct MI300X x8 (gfx942)", "mi300xx8", "catalog mi300x"),
    ("RX 7900 XTX", "rx-7900-xtxx1", "catalog rx-7900-xtx"),
    ("AMD Radeon RX 9070 XT (gfx1201, 16 GB), ROCm 7.2", "rx-9070-xtx1", "catalog rx-9070-xt"),
    ("gfx1100", "gfx1100x1", "unmodelled an AMD GPU (ROCm)"),
    ("AMD Instinct MI308X (gfx942) x8", "gfx942x8", "unmodelled an AMD GPU (ROCm)"),
    ("Ascend NPU 64 GiB", "ascend-npu-64-gibx1", "unmodelled Huawei Ascend (NPU)"),
    ("Intel Gaudi 3", "intel-gaudi-3x1", "unmodelled Intel Gaudi (HPU)"),
])
def test_amd_and_other_vendor_gpu_texts(text, gpu, how):
    # an Ascend NPU is never proxied by the NVIDIA GPU of the nearest memory size
    assert bench.gpu_setup({"gpu": text}, 1) == (gpu, how)


def test_a_cpu_backend_row_names_no_accelerator():
    assert bench.gpu_setup({"gpu": "AMD Ryzen 9 8945HS (CPU backend)"}, 1)[0] is None


@pytest.mark.parametrize("model, qtype", [
    ("DeepSeek-R1-Distill-Llama-70B-Q8_0.gguf", "Q8_0"),
    ("Qwen3-32B-Q6_K.gguf (local)", "Q6_K"),
    ("tinyllama-1.1b-chat-v1.0.Q4_K_M.gguf", "Q4_K"),
    ("unsloth Qwen3-235B-A22B UD-Q4_K_XL GGUF (merged)", None),  # no file named: a mix
    ("DeepSeek-R1-0528 GGUF UD-IQ2_XXS", None),  # I-quant mix: per-tensor types not given
    ("Qwen2.5-72B-Instruct-AWQ", None),
])
def test_gguf_type_named(model, qtype):
    got = bench.gguf_type_named(model)
    assert (got.name if got is not None else None) == qtype


def test_vllm_row_serving_a_q8_0_gguf_gets_a_gguf_of_its_type(tmp_path):
    """A vLLM row naming a .gguf file is checked on a GGUF of the named type, not on the
    16-bit checkpoint the name's model family publishes."""
    from servepilot.checkpoint.inspect import inspect_path
    from servepilot.planning.weights import architecture_tensors

    files = {"config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                             "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                             "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1024,
                             "torch_dtype": "bfloat16"}}
    path = bench.write_model(tmp_path, "row", files, "vllm", "Tiny-Llama-Q8_0.gguf")
    spec = inspect_path(path)
    assert spec.format == "gguf" and spec.gguf.tensor_types.get("Q8_0")
    plain = bench.write_model(tmp_path, "row2", files, "vllm", "Tiny-Llama")
    assert inspect_path(plain).format == "hf"
    sixteen_bits = sum(t.nbytes for t in architecture_tensors(inspect_path(plain)))
    # Q8_0: 34 bytes per 32 weights (norms in F32, a few KiB)
    assert spec.weights.total_bytes == pytest.approx(sixteen_bits * 34 / 64, rel=0.02)
