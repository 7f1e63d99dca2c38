"""The flag-table generator reads engine sources as vLLM's/llama.cpp's parsers would."""

from servepilot.engines.flaggen import llamacpp_rows, rows_over_versions, vllm_flags_of

ARG_UTILS = '''
from dataclasses import dataclass
@dataclass
class EngineArgs:
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    gpu_memory_utilization: float = 0.9
    hf_overrides: HfOverrides = None
    kv_cache_dtype: CacheDType = "auto"
    kv_cache_memory_bytes: int | None = None
    compilation_config: CompilationConfig = None
    served_model_name: str | list[str] | None = None
    new_flag: bool = False

    @staticmethod
    def add_cli_args(parser):
        g.add_argument("--tensor-parallel-size", "-tp", **parallel_kwargs["tensor_parallel_size"])
        g.add_argument("--enforce-eager", **model_kwargs["enforce_eager"])
        g.add_argument("--gpu-memory-utilization", **cache_kwargs["gpu_memory_utilization"])
        g.add_argument("--hf-overrides", **model_kwargs["hf_overrides"])
        g.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        g.add_argument("--kv-cache-memory-bytes", **cache_kwargs["kv_cache_memory_bytes"])
        g.add_argument("--compilation-config", "-cc", **vllm_kwargs["compilation_config"])
        g.add_argument("--served-model-name", **model_kwargs["served_model_name"])
        g.add_argument("--hf-token", type=str, nargs="?", const=True)
        g.add_argument("--disable-log-requests", action="store_true")
        NEW
'''
CLI_ARGS = '''
class FrontendArgs:
    host: str | None = None
    port: int = 8000
    enable_auto_tool_choice: bool = False
    @staticmethod
    def add_cli_args(parser):
        frontend_kwargs = get_kwargs(FrontendArgs)
        parser.add_argument("--config")
'''


def _sdist(root, with_new):
    (root / "vllm/engine").mkdir(parents=True)
    (root / "vllm/entrypoints/openai").mkdir(parents=True)
    new = 'g.add_argument("--new-flag", **model_kwargs["new_flag"])' if with_new else "pass"
    (root / "vllm/engine/arg_utils.py").write_text(ARG_UTILS.replace("NEW", new))
    (root / "vllm/entrypoints/openai/cli_args.py").write_text(CLI_ARGS)
    return root


def test_vllm_rows_kinds_dests_and_ranges(tmp_path):
    old = vllm_flags_of(_sdist(tmp_path / "a", with_new=False))
    new = vllm_flags_of(_sdist(tmp_path / "b", with_new=True))
    rows = {r["name"]: r for r in rows_over_versions({"0.15.0": old, "0.16.0": new})}
    assert rows["-tp"]["dest"] == "tensor_parallel_size" and rows["-tp"]["kind"] == "int"
    assert rows["--enforce-eager"]["kind"] == "bool"
    assert rows["--gpu-memory-utilization"]["kind"] == "float"
    assert rows["--hf-overrides"]["kind"] == "json"
    assert rows["--kv-cache-dtype"]["dest"] == "kv_cache_dtype" and rows["--kv-cache-dtype"]["kind"] == "str"
    assert rows["--kv-cache-memory-bytes"]["kind"] == "human_int"
    assert rows["-cc"]["kind"] == "json"
    assert rows["--served-model-name"]["kind"] == "list"
    assert rows["--hf-token"]["kind"] == "optional"
    assert rows["--disable-log-requests"]["kind"] == "store_true"
    assert rows["--port"]["kind"] == "int" and rows["--enable-auto-tool-choice"]["kind"] == "bool"
    assert rows["--new-flag"]["versions"] == ">=0.16.0"
    assert rows["-tp"]["versions"] == ""
    assert rows["-tp"]["source"] == "vllm/engine/arg_utils.py@v0.16.0"


ARG_CPP = '''
    add_opt(common_arg(
        {"-c", "--ctx-size"}, "N",
        "size of the prompt context",
        [](common_params & params, int value) { params.n_ctx = value; }
    ));
    add_opt(common_arg(
        {"--jinja"},
        {"--no-jinja"},
        "use jinja",
        [](common_params & params, bool value) { params.use_jinja = value; }
    ));
    add_opt(common_arg(
        {"-ngl", "--gpu-layers", "--n-gpu-layers"}, "N",
        "layers on the GPU",
        [](common_params & params, const std::string & value) { }
    ));
    add_opt(common_arg(
        {"--mlock"},
        "lock",
        [](common_params & params) { params.use_mlock = true; }
    ));
    args.push_back(common_arg(
        {"stop-timeout"}, "N",
        "preset only",
        [](common_params &, const std::string &) { }
    ));
'''


def test_llamacpp_rows(tmp_path):
    path = tmp_path / "arg.cpp"
    path.write_text(ARG_CPP)
    rows = {r["name"]: r for r in llamacpp_rows(path, "0123456789abcdef")}
    assert rows["-c"]["dest"] == "ctx_size" and rows["-c"]["kind"] == "int"
    assert rows["--jinja"]["kind"] == "bool" and rows["--no-jinja"]["kind"] == "negate"
    assert rows["-ngl"]["dest"] == "n_gpu_layers" and rows["-ngl"]["kind"] == "int_or_str"
    assert rows["--mlock"]["kind"] == "store_true"
    assert "stop-timeout" not in rows
    assert rows["-c"]["source"] == "common/arg.cpp@0123456789#L2"
