"""build_deployment and `servepilot deployment`: the command, the model, the GPUs, bad input."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from servepilot.cli.main import main
from servepilot.deployment import build_deployment
from servepilot.errors import BadInput, CommandLineError, UnknownGpu

_spec = importlib.util.spec_from_file_location("servepilot_tests_fake_nvml",
                                               Path(__file__).parent / "hardware" / "fake_nvml.py")
fake_nvml = sys.modules.get(_spec.name) or importlib.util.module_from_spec(_spec)
if _spec.name not in sys.modules:
    sys.modules[_spec.name] = fake_nvml
    _spec.loader.exec_module(fake_nvml)

from story_commands import STORY_SSH  # noqa: E402

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "head_dim": 128,
}


@pytest.fixture
def checkpoint(tmp_path):
    d = tmp_path / "llama-8b"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    return d


@pytest.fixture(autouse=True)
def no_real_gpus(monkeypatch):
    """Every probe in this file sees the fake NVML, never this machine's."""
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml([], library_missing=True))


def test_story_deployment_over_ssh():
    d = build_deployment(STORY_SSH, gpu="rtx-pro-6000x8", engine_version="0.16.0rc2.dev313")
    assert d.engine == "vllm" and d.engine_version == "0.16.0rc2.dev313"
    assert d.extra["engine_version_source"] == "flag"
    assert d.launch.model == "/shared/kimi-k2.5-nvfp4"
    assert d.launch.tensor_parallel_size == 8
    assert d.launch.shell.ssh_host == "root@10.1.230.174"
    assert d.launch.shell.stdout_file == "/tmp/vllm_kimi2.log"
    assert d.spec is None
    assert any("is on root@10.1.230.174" in n for n in d.notes)
    assert d.cluster.source == "flag" and d.cluster.count == 8
    assert d.cluster.gpus[0].cc_int == 120


def test_ssh_without_gpu_flag_does_not_probe_this_machine():
    d = build_deployment(STORY_SSH, engine_version="0.16.0")
    assert d.cluster.source == "none" and d.cluster.remote_host == "root@10.1.230.174"
    assert any("--gpu" in n for n in d.cluster.notes)


def test_local_checkpoint_is_inspected_and_gpus_probed(monkeypatch, checkpoint):
    fake_nvml.install(monkeypatch, fake_nvml.FakeNvml(fake_nvml.h100_nvlink_box(4)))
    d = build_deployment(f"CUDA_VISIBLE_DEVICES=2,3 vllm serve {checkpoint} -tp 2 --port 8123", engine_version="0.16.0")
    assert d.spec is not None and d.spec.architectures == ("LlamaForCausalLM",)
    assert [g.index for g in d.cluster.gpus] == [2, 3]
    assert d.cluster.source == "probe" and d.cluster.extra["port"] == 8123


def test_cuda_visible_devices_narrows_a_gpu_flag(checkpoint):
    d = build_deployment(f"CUDA_VISIBLE_DEVICES=1 vllm serve {checkpoint}", gpu="h200x8", engine_version="0.16.0")
    assert [g.index for g in d.cluster.gpus] == [1]
    assert d.cluster.topology is None


def test_no_gpu_no_flag_says_so(checkpoint):
    d = build_deployment(["vllm", "serve", str(checkpoint)], engine_version="0.16.0")
    assert d.cluster.source == "none" and d.cluster.count == 0
    assert any(n.startswith("no GPU found") and "--gpu" in n for n in d.cluster.notes)


def test_engine_version_falls_back_to_installed_package(monkeypatch, checkpoint):
    import servepilot.engines.versions as versions

    monkeypatch.setattr(versions, "installed_version", lambda engine, program=None: "0.16.0")
    d = build_deployment(["vllm", "serve", str(checkpoint)], gpu="h100")
    assert (d.engine_version, d.extra["engine_version_source"]) == ("0.16.0", "installed")


def test_installed_llama_cpp_python_version_is_read_from_metadata(checkpoint):
    from importlib.metadata import PackageNotFoundError, version

    try:
        expected = version("llama_cpp_python")
    except PackageNotFoundError:
        pytest.skip("llama-cpp-python is not installed (the e2e extra); see the dist-info test below")
    d = build_deployment(["python", "-m", "llama_cpp.server", "--model", str(checkpoint)], gpu="t4")
    assert d.engine == "llama.cpp"
    assert (d.engine_version, d.extra["engine_version_source"]) == (expected, "installed")
    remote = build_deployment(f"ssh h python -m llama_cpp.server --model {checkpoint}", gpu="t4")
    assert remote.engine_version is None  # over ssh the package installed here says nothing
    assert any("version on h unknown" in n for n in remote.notes)


def test_unknown_version_noted(checkpoint):
    d = build_deployment(["vllm", "serve", str(checkpoint)], gpu="h100")
    assert d.engine_version is None
    assert any("no --engine-version" in n for n in d.notes)


def test_hf_id_not_in_cache_is_a_note(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    d = build_deployment("vllm serve nvidia/Kimi-K2.5-NVFP4 -tp 8", gpu="rtx-pro-6000x8", engine_version="0.16.0")
    assert d.spec is None
    assert any("nvidia/Kimi-K2.5-NVFP4" in n for n in d.notes)


def test_missing_local_model_path_is_bad_input():
    with pytest.raises(BadInput) as exc:
        build_deployment("vllm serve /no/such/model -tp 2", gpu="h100", engine_version="0.16.0")
    assert "/no/such/model" in exc.value.one_line()


def test_command_file(tmp_path, checkpoint):
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\nset -e\nexport VLLM_LOGGING_LEVEL=DEBUG\nexec vllm serve {checkpoint} "
                      "--max-model-len 8k\n")
    d = build_deployment(command_file=str(script), gpu="l4", engine_version="0.16.0")
    assert d.launch.options["max_model_len"] == 8000
    assert d.launch.shell.env == {"VLLM_LOGGING_LEVEL": "DEBUG"}


@pytest.mark.parametrize(
    "kwargs,error",
    [({"command": "torchrun x.py"}, CommandLineError), ({"command": "vllm serve /m", "gpu": "h1OO"}, UnknownGpu),
     ({"command": []}, CommandLineError), ({"command": "vllm serve /m", "engine_version": "latest"}, BadInput),
     ({"command_file": "/no/such/script.sh"}, BadInput)],
)
def test_bad_input_is_typed(kwargs, error):
    with pytest.raises(error):
        build_deployment(**kwargs)


def test_cli_json(capsys, checkpoint):
    rc = main(["deployment", "--json", "--gpu", "h200x8", "--engine-version", "0.16.0", "--",
               "NCCL_DEBUG=INFO", "vllm", "serve", str(checkpoint), "-tp", "8", "--kv-cache-dtype", "fp8"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert list(out)[0] == "schema" and out["schema"] == "servepilot.deployment/1"
    assert out["engine"] == "vllm" and out["engine_version"] == "0.16.0"
    assert out["options"]["tensor_parallel_size"] == 8 and out["options"]["kv_cache_dtype"] == "fp8"
    assert "kv_cache_dtype" in out["explicit"] and "port" not in out["explicit"]
    assert out["shell"]["env"] == {"NCCL_DEBUG": "INFO"}
    assert out["cluster"]["count"] == 8 and out["cluster"]["gpus"][0]["compute_capability"] == [9, 0]
    assert out["spec"]["architectures"] == ["LlamaForCausalLM"]
    assert out["command"].startswith("NCCL_DEBUG=INFO vllm serve ")


def test_cli_text(capsys):
    assert main(["deployment", "--gpu", "rtx-pro-6000x8", "--engine-version", "0.16.0", "--", STORY_SSH]) == 0
    out = capsys.readouterr().out
    for expected in ("vllm 0.16.0", "tensor_parallel_size=8", "kv_cache_dtype=auto", "root@10.1.230.174",
                     "/tmp/vllm_kimi2.log", "NCCL_PROTO=LL", "RTX PRO 6000"):
        assert expected in out


@pytest.mark.parametrize(
    "args,fragment",
    [(["--", "torchrun", "x.py"], "torchrun"), (["--gpu", "h1OO", "--", "vllm", "serve", "/m"], "did you mean"),
     (["--", "vllm", "serve", "/no/such/model"], "/no/such/model"), ([], "no command")],
)
def test_cli_bad_input_one_line_exit_2(capsys, args, fragment):
    assert main(["deployment", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("servepilot: error: ") and fragment in err[0]


def test_cli_yaml_not_a_mapping(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("- 1\n- 2\n")
    assert main(["deployment", "--gpu", "t4", "--", "vllm", "serve", "/m", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "mapping" in err


def test_every_json_key_is_documented(capsys, checkpoint):
    """docs/json/deployment.md names every key the command prints (top level, shell, cluster, gpu)."""
    doc = (Path(__file__).parents[1] / "docs" / "json" / "deployment.md").read_text()
    assert main(["deployment", "--json", "--gpu", "h100x2", "--engine-version", "0.16.0", "--", "vllm", "serve",
                 str(checkpoint)]) == 0
    out = json.loads(capsys.readouterr().out)
    keys = [*out, *out["shell"], *out["cluster"], *out["cluster"]["gpus"][0]]
    missing = [k for k in keys if f"`{k}`" not in doc]
    assert not missing


def test_engine_version_is_read_from_installed_metadata_without_the_engine(checkpoint, tmp_path, monkeypatch):
    # The same reading, with or without the e2e extra: a dist-info directory is what pip
    # leaves behind, and importlib.metadata finds the first one on sys.path.
    info = tmp_path / "site" / "llama_cpp_python-9.8.7.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 9.8.7\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    d = build_deployment(["python", "-m", "llama_cpp.server", "--model", str(checkpoint)], gpu="t4")
    assert (d.engine_version, d.extra["engine_version_source"]) == ("9.8.7", "installed")
