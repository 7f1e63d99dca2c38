"""Engine command lines as operators type them: parse, normalize, render back, change."""

import json

import pytest
from story_commands import STORY_PKILL, STORY_SSH

from servepilot.engines.cmdline import parse_command, render_command, with_model, with_options
from servepilot.errors import BadInput, CommandLineError


def test_story_ssh_command_parses_to_the_remote_vllm_launch():
    launch = parse_command(STORY_SSH, engine_version="0.16.0rc2.dev313")
    assert launch.engine == "vllm"
    assert launch.program == "python -m vllm.entrypoints.openai.api_server"
    assert launch.argv[0] == "/root/ml-env/bin/python3"
    assert launch.model == "/shared/kimi-k2.5-nvfp4"
    o = launch.options
    assert o["tensor_parallel_size"] == 8 and launch.tensor_parallel_size == 8
    assert o["kv_cache_dtype"] == "auto" and "kv_cache_dtype" in launch.explicit
    assert o["trust_remote_code"] is True
    assert launch.port == 8000
    assert o["tool_call_parser"] == "kimi_k2" and o["reasoning_parser"] == "kimi_k2"
    assert o["disable_log_requests"] is True
    assert launch.unknown_flags == ()
    s = launch.shell
    assert s.ssh_host == "root@10.1.230.174"
    assert s.env == {"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"}
    assert s.nohup and s.background
    assert s.stdout_file == s.stderr_file == "/tmp/vllm_kimi2.log" and not s.append
    assert s.tail == ('echo "PID: $!"',)


def test_story_pkill_prefix_is_kept_and_the_log_file_found():
    launch = parse_command(STORY_PKILL, engine_version="0.16.0")
    assert launch.model == "/shared/kimi-k2.5-nvfp4"
    assert launch.shell.ssh_host is None
    assert launch.shell.prefix_commands == (
        'pkill -9 -f "python3.*vllm" 2>/dev/null;',
        "sleep 3;",
        "rm -f /dev/shm/psm_* /dev/shm/sem.mp-*;",
    )
    assert launch.shell.stdout_file == "/tmp/vllm_kimi.log"
    assert launch.shell.background


@pytest.mark.parametrize("text", [STORY_SSH, STORY_PKILL])
def test_story_commands_round_trip(text):
    first = parse_command(text, engine_version="0.16.0")
    again = parse_command(render_command(first), engine_version="0.16.0")
    assert again.options == first.options
    assert again.shell == first.shell
    assert again.argv == first.argv


def test_defaults_are_filled_but_not_explicit():
    launch = parse_command("vllm serve /m", engine_version="0.16.0")
    assert launch.options["gpu_memory_utilization"] == 0.9
    assert launch.options["port"] == 8000
    assert launch.options["kv_cache_dtype"] == "auto"
    assert "gpu_memory_utilization" not in launch.explicit
    assert launch.explicit == {"model"}


# Command lines from public bug reports (failures corpus `flags` and issue texts), as literals.
REAL_LINES = [
    'CUDA_VISIBLE_DEVICES=0 ./llama.cpp/build/bin/main -m zephyr-7b-beta.Q5_K_S.gguf --log-disable --ctx-size 8192  '
    '--threads 4 --n-gpu-layers 4 -p "Test"',
    'vllm serve "${MODEL_PATH}" --served-model-name "${MODEL}" --kv-cache-dtype fp8 '
    '--disable-access-log-for-endpoints=/health,/metrics --max-num-seqs "${MAX_NUM_SEQS}" --tensor-parallel-size 8 '
    '--enable-expert-parallel --speculative-config '
    '"{\\"method\\":\\"mtp\\",\\"num_speculative_tokens\\":${SPEC_TOKENS}}" --no-enable-flashinfer-autotune '
    '--reasoning-parser glm45 --tool-call-parser glm47 --enable-auto-tool-choice --enable-prompt-tokens-details',
    "vllm serve /tmp/model/Qwen3-Coder-480B-A35B-Instruct-FP8 --served-model-name Qwen3-Coder-480B-A35B-FP8 -dp=8  "
    "--enable-expert-parallel --enable-auto-tool-choice --tool-call-parser qwen3_coder --gpu-memory-utilization 0.95",
    "CUDA_VISIBLE_DEVICES=7 python -m vllm.entrypoints.openai.api_server     --model qwen/Qwen1.5-7B-Chat-GPTQ-Int4    "
    " --served-model-name qwen/Qwen1.5-7B-Chat-GPTQ-Int4     --quantization gptq",
    "export CUDA_VISIBLE_DEVICES=1\nnohup python -m vllm.entrypoints.openai.api_server --model /PROJECT/model/1/ "
    "--trust_remote_code --dtype half --host 127.0.0.1 --port 8000 --tensor-parallel-size 1 > 1_vllm.log 2>&1 "
    "&\nexport CUDA_VISIBLE_DEVICES=3\nnohup python -m vllm.entrypoints.openai.api_server --model /PROJECT/model/2/ "
    "--trust_remote_code --dtype half --host 127.0.0.1 --port 8003 --tensor-parallel-size 1 > 2_vllm.log 2>&1 &",
    "vllm serve internvl2-8b/",
    "vllm serve /workspace/LLM_Weights/deepseek-ai/DeepSeek-V3.2 --port 40001 --host 0.0.0.0 --trust-remote-code "
    "--served-model-name deepseek-v3.2-new --max-model-len 131072 --gpu-memory-utilization 0.95 -dp 8 "
    "--enable-expert-parallel --max-num-seqs 256",
    "VLLM_USE_V1=1 vllm serve neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8 --max-model-len 2048 "
    "--gpu-memory-utilization 0.98",
    "vllm serve m --attention_config.use_fp4_indexer_cache=True --moe-backend deep_gemm_mega_moe",
    "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code "
    "--mem-fraction-static 0.7 --cuda-graph-max-bs 16",
    "python3 -m sglang.launch_server --model-path Qwen/Qwen2-7B --disable-cuda-graph --port 30001 --host 0.0.0.0",
    "llama-server -m /models/q.gguf -c 16384 -ngl 99 -ctk q8_0 -ctv q8_0 --port 8081 --host 0.0.0.0 -fa on",
    "python -m llama_cpp.server --model /models/q.gguf --n_ctx 4096 --n_gpu_layers -1 --port 8005",
    "vllm serve m -tp 4 -pp 2 -O3 --attention-config.backend=FLASHINFER_MLA --hf-overrides '{\"rope_scaling\": "
    "{\"type\": \"yarn\", \"factor\": 4}}' --kv-cache-memory-bytes 20G --no-enable-prefix-caching 2>&1 | tee -a "
    "/tmp/serve.log",
]


@pytest.mark.parametrize("line", REAL_LINES)
@pytest.mark.parametrize("version", ["0.16.0", None])
def test_real_command_lines_round_trip(line, version):
    first = parse_command(line, engine_version=version)
    rendered = render_command(first)
    again = parse_command(rendered, engine_version=version)
    assert again.options == first.options, rendered
    assert again.shell == first.shell, rendered
    assert again.unknown_flags == first.unknown_flags


def test_short_forms_dotted_json_and_byte_sizes():
    launch = parse_command(REAL_LINES[-1], engine_version="0.16.0")
    o = launch.options
    assert (o["tensor_parallel_size"], o["pipeline_parallel_size"]) == (4, 2)
    assert o["optimization_level"] == "3"
    assert o["attention_config"] == {"backend": "FLASHINFER_MLA"}
    assert o["hf_overrides"] == {"rope_scaling": {"type": "yarn", "factor": 4}}
    assert o["kv_cache_memory_bytes"] == 20 * 2**30
    assert o["enable_prefix_caching"] is False
    assert launch.shell.stdout_file == "/tmp/serve.log" and launch.shell.append


def test_dp_equals_and_served_model_name_list():
    launch = parse_command(REAL_LINES[2], engine_version="0.10.1.dev101+gbda9d0535")
    assert launch.data_parallel_size == 8
    assert launch.options["served_model_name"] == ["Qwen3-Coder-480B-A35B-FP8"]
    assert launch.options["enable_expert_parallel"] is True


def test_underscore_flags_and_export_env():
    launch = parse_command(REAL_LINES[4], engine_version="0.16.0")
    assert launch.model == "/PROJECT/model/1/"  # the first server in the script
    assert launch.options["trust_remote_code"] is True
    assert launch.shell.env == {"CUDA_VISIBLE_DEVICES": "1"}
    assert launch.shell.stdout_file == "1_vllm.log"


def test_unset_shell_variables_are_kept_and_reported():
    launch = parse_command(REAL_LINES[1], engine_version="0.16.0")
    assert launch.model == "${MODEL_PATH}"
    assert launch.options["max_num_seqs"] == "${MAX_NUM_SEQS}"
    assert any("${MAX_NUM_SEQS}" in n for n in launch.notes)
    assert launch.options["enable_flashinfer_autotune"] is False


def test_script_variables_are_expanded(tmp_path):
    script = tmp_path / "serve.sh"
    script.write_text(
        "#!/bin/bash\n# launch the model\nMODEL=/models/llama\nTP=2\n"
        "export HF_HOME=/cache\n"
        "vllm serve $MODEL --tensor-parallel-size ${TP} --port 8001 >> /var/log/vllm.log 2> /var/log/vllm.err\n"
    )
    launch = parse_command(command_file=str(script), engine_version="0.16.0")
    assert launch.model == "/models/llama"
    assert launch.tensor_parallel_size == 2
    assert launch.shell.env == {"HF_HOME": "/cache"}
    assert launch.shell.stdout_file == "/var/log/vllm.log" and launch.shell.append
    assert launch.shell.stderr_file == "/var/log/vllm.err"


def test_unknown_flags_are_kept_and_reported_per_version():
    old = parse_command(REAL_LINES[8], engine_version="0.16.0")
    assert old.unknown_flags == ("--moe-backend",)
    assert old.options["moe_backend"] == "deep_gemm_mega_moe"
    assert any("--moe-backend is not a flag of vllm 0.16.0" in n for n in old.notes)
    assert "--moe-backend deep_gemm_mega_moe" in render_command(old)
    story_on_018 = parse_command(STORY_SSH, engine_version="0.18.0")
    assert story_on_018.unknown_flags == ("--disable-log-requests",)
    never = parse_command("vllm serve m --no-such-flag 3", engine_version="0.16.0")
    assert never.options["no_such_flag"] == "3"
    assert any("not in servepilot's vllm flag table" in n for n in never.notes)


def test_sglang_abbreviation_and_human_context_length():
    launch = parse_command("sglang serve --model-path Qwen/Qwen3-8B --tp 2 --context-length 32k --kv-cache-dtype "
                           "fp8_e5m2")
    assert launch.engine == "sglang"
    assert launch.model == "Qwen/Qwen3-8B"
    assert launch.options["tp_size"] == 2  # argparse prefix of --tp-size
    assert launch.options["context_length"] == 32000
    assert launch.port == 30000  # SGLang's default, not vLLM's


def test_llamacpp_server_and_python_server():
    server = parse_command(REAL_LINES[11])
    assert server.engine == "llama.cpp" and server.program == "llama-server"
    o = server.options
    assert (o["ctx_size"], o["n_gpu_layers"], o["cache_type_k"], o["cache_type_v"]) == (16384, 99, "q8_0", "q8_0")
    assert (o["port"], o["host"]) == (8081, "0.0.0.0")
    py = parse_command(REAL_LINES[12])
    assert py.program == "python -m llama_cpp.server"
    assert (py.options["n_ctx"], py.options["n_gpu_layers"], py.port) == (4096, -1, 8005)


def test_ssh_options_and_words_given_separately():
    launch = parse_command(["ssh", "-p", "2222", "-o", "BatchMode=yes", "gpu1", "vllm serve /m -tp 2 > /tmp/l.log "
                                                                                "2>&1"])
    assert launch.shell.ssh_host == "gpu1"
    assert launch.shell.ssh_options == ("-p", "2222", "-o", "BatchMode=yes")
    assert launch.tensor_parallel_size == 2
    assert render_command(launch).startswith("ssh -p 2222 -o BatchMode=yes gpu1 ")


def test_env_wrapper_and_and_tail():
    launch = parse_command("env -u FOO CUDA_VISIBLE_DEVICES=0,1 vllm serve /m && echo done")
    assert launch.shell.env == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert launch.shell.tail == ("&& echo done",)
    assert parse_command(render_command(launch)).shell == launch.shell


def test_with_options_replaces_in_place_and_appends():
    launch = parse_command(STORY_PKILL, engine_version="0.16.0")
    changed = with_options(launch,
                           {"kv_cache_dtype": "bfloat16", "enforce_eager": True,
                            "attention_backend": "TRITON_MLA"}, unset=["port"])
    text = render_command(changed)
    assert "--kv-cache-dtype bfloat16 --port" not in text
    # replaced where it was written: between --trust-remote-code and --disable-log-requests
    assert (text.index("--trust-remote-code") < text.index("--kv-cache-dtype bfloat16")
            < text.index("--disable-log-requests"))
    assert text.rstrip().endswith("--attention-backend TRITON_MLA > /tmp/vllm_kimi.log 2>&1 &")
    assert changed.options["kv_cache_dtype"] == "bfloat16"
    assert changed.options["enforce_eager"] is True
    assert "port" not in changed.explicit and changed.port == 8000  # back to the default
    assert changed.shell == launch.shell
    off = with_options(changed, {"enforce_eager": False})
    assert "--no-enforce-eager" in render_command(off)
    assert off.options["enforce_eager"] is False


def test_with_options_collapses_dotted_json_into_one_flag():
    launch = parse_command("vllm serve m -ac.backend=FLASHINFER_MLA --attention-config.use_trtllm_attention=false",
                           engine_version="0.16.0")
    assert launch.options["attention_config"] == {"backend": "FLASHINFER_MLA", "use_trtllm_attention": False}
    changed = with_options(launch, {"attention_config": {"backend": "TRITON_MLA"}})
    assert render_command(changed) == 'vllm serve m --attention-config \'{"backend":"TRITON_MLA"}\''


def test_with_model_for_each_engine():
    v = with_model(parse_command("vllm serve /m/kimi -tp 8", engine_version="0.16.0"), "/overlays/kimi", "kimi")
    assert render_command(v) == "vllm serve /overlays/kimi -tp 8 --served-model-name kimi"
    assert v.model == "/overlays/kimi"
    s = with_model(parse_command("python -m sglang.launch_server --model-path /m --tp-size 2"), "/o")
    assert s.model == "/o" and s.options["tp_size"] == 2
    ll = with_model(parse_command("llama-server -m /a.gguf -c 4096"), "/b.gguf", "b")
    assert render_command(ll) == "llama-server -m /b.gguf -c 4096 --alias b"


def test_with_options_rejects_unknown_dest():
    launch = parse_command("vllm serve m", engine_version="0.16.0")
    with pytest.raises(BadInput, match="no flag for 'not_a_field'"):
        with_options(launch, {"not_a_field": 1})


def test_config_yaml_merges_under_the_cli(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("tensor-parallel-size: 4\nport: 9000\nenforce-eager: true\nenable-prefix-caching: false\n"
                   "compilation-config:\n  level: 3\nserved-model-name: [a, b]\n")
    launch = parse_command(["vllm", "serve", "/m", "--config", str(cfg), "-tp", "8"], engine_version="0.16.0")
    assert launch.config_file == str(cfg)
    assert launch.tensor_parallel_size == 8  # CLI wins over the YAML
    assert launch.port == 9000
    assert launch.options["enforce_eager"] is True
    assert "enable_prefix_caching" not in launch.options  # `false` in the YAML: vLLM drops the key
    assert launch.options["compilation_config"] == {"level": 3}
    assert launch.options["served_model_name"] == ["a", "b"]


def test_config_yaml_relative_to_cwd(tmp_path):
    (tmp_path / "c.yml").write_text("max-model-len: 32k\n")
    launch = parse_command("vllm serve /m --config c.yml", engine_version="0.16.0", cwd=tmp_path)
    assert launch.options["max_model_len"] == 32000


@pytest.mark.parametrize(
    "content,message",
    [("- tensor-parallel-size: 4\n",
      "must be a mapping"), ("just a string\n", "must be a mapping"), ("a: [b\n", "not valid YAML")],
)
def test_config_yaml_that_is_not_a_mapping_is_bad_input(tmp_path, content, message):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(content)
    with pytest.raises(BadInput, match=message) as exc:
        parse_command(f"vllm serve /m --config {cfg}")
    assert str(cfg) in exc.value.one_line()


def test_config_file_missing_or_wrong_type(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        parse_command(f"vllm serve /m --config {tmp_path / 'none.yaml'}")
    other = tmp_path / "c.json"
    other.write_text("{}")
    with pytest.raises(BadInput, match="yaml or .yml only"):
        parse_command(f"vllm serve /m --config {other}")


@pytest.mark.parametrize(
    "command,message",
    [
        ("torchrun --nproc-per-node=2 t01_vllm_sandbox.py", "first program: 'torchrun'"),
        ("vllm server --model /x --port 40001", "vllm server"),
        ("echo 'unterminated", "unterminated single quote"),
        ("   ", "empty command"),
    ],
)
def test_bad_commands_raise_one_clear_error(command, message):
    with pytest.raises(CommandLineError, match=message) as exc:
        parse_command(command)
    assert "\n" not in exc.value.one_line()


def test_value_problems_are_noted_not_fatal():
    launch = parse_command("vllm serve m --kv-cache-memory-bytes 20GiB -tp two", engine_version="0.16.0")
    assert launch.options["kv_cache_memory_bytes"] == 20 * 2**30
    assert any("vLLM accepts '20G'" in n for n in launch.notes)
    assert launch.options["tensor_parallel_size"] == "two"
    assert any("tensor_parallel_size = 'two' is not a whole number: the engine's parser rejects it" in n
               for n in launch.notes)


def test_json_rendering_survives_quotes():
    payload = {"method": "mtp", "num_speculative_tokens": 3, "note": "it's"}
    launch = parse_command(["vllm", "serve", "m", "--speculative-config", json.dumps(payload)], engine_version="0.16.0")
    assert launch.options["speculative_config"] == payload
    assert parse_command(render_command(launch), engine_version="0.16.0").options["speculative_config"] == payload


def test_attention_backend_from_attention_config():
    launch = parse_command("vllm serve m --attention-config.backend=flashinfer_mla", engine_version="0.16.0")
    assert launch.options["attention_backend"] == "FLASHINFER_MLA"
    assert "attention_backend" in launch.explicit
    changed = with_options(launch, {"attention_backend": "TRITON_MLA"})
    assert render_command(changed) == "vllm serve m --attention-config '{\"backend\":\"TRITON_MLA\"}'"
    assert changed.options["attention_backend"] == "TRITON_MLA"
    both = parse_command("vllm serve m --attention-backend X -ac.backend=Y", engine_version="0.16.0")
    assert any("mutually exclusive" in n for n in both.notes)


def test_sudo_and_exec_wrappers_are_kept():
    launch = parse_command("sudo -E -u svc CUDA_VISIBLE_DEVICES=0 vllm serve /m --port 8001")
    assert launch.argv == ("vllm", "serve", "/m", "--port", "8001")
    assert launch.shell.wrappers == ("sudo", "-E", "-u", "svc")
    assert launch.shell.env == {"CUDA_VISIBLE_DEVICES": "0"}
    again = parse_command(render_command(launch))
    assert again.shell == launch.shell and again.options == launch.options


def test_version_newer_than_the_table_is_said():
    launch = parse_command("vllm serve m --brand-new-flag 1", engine_version="0.99.0")
    assert launch.unknown_flags == ("--brand-new-flag",)
    assert any("newer than the newest version in servepilot's flag table (0.34.0)" in n for n in launch.notes)


def test_api_server_ignores_a_positional_model():
    launch = parse_command("python -m vllm.entrypoints.openai.api_server /models/llama --port 8001",
                           engine_version="0.16.0")
    assert launch.model is None
    assert any("ignores the positional '/models/llama'" in n for n in launch.notes)
    served = parse_command("vllm serve /models/llama --port 8001", engine_version="0.16.0")
    assert served.model == "/models/llama" and not served.notes


def test_nohup_without_redirection_appends_to_nohup_out():
    launch = parse_command("nohup vllm serve /m &")
    assert (launch.shell.stdout_file, launch.shell.stderr_file, launch.shell.append) == ("nohup.out", "nohup.out", True)
    assert parse_command(render_command(launch)).shell == launch.shell
    plain = parse_command("vllm serve /m 2>&1")
    assert plain.shell.stdout_file is None and plain.shell.stderr_file is None


def test_shell_dash_c_is_parsed_inside_and_rendered_back():
    k8s = parse_command(["/bin/bash", "-lc", "vllm serve /m --port 8001 > /l 2>&1"])
    assert k8s.shell.shell_wrapper == ("/bin/bash", "-lc") and k8s.port == 8001 and k8s.shell.stdout_file == "/l"
    nested = parse_command("""ssh gpu1 "bash -c 'NCCL_X=1 vllm serve /m -tp 2'" """)
    assert (nested.shell.ssh_host, nested.shell.shell_wrapper,
            nested.shell.env) == ("gpu1", ("bash", "-c"), {"NCCL_X": "1"})
    for launch in (k8s, nested):
        again = parse_command(render_command(launch))
        assert again.shell == launch.shell and again.options == launch.options


def test_running_a_script_points_to_command_file():
    with pytest.raises(CommandLineError, match="pass --command-file run.sh"):
        parse_command("bash run.sh")


@pytest.mark.parametrize("value", ["[" * 100_000, "1" + "0" * 5000], ids=["deep", "huge-int"])
def test_dotted_json_flag_python_cannot_decode_is_kept_as_text(value):
    # `--hf-overrides.x=<value>`: json.loads raises RecursionError / a plain ValueError
    # here, not JSONDecodeError; the word is kept as the string the engine would get.
    launch = parse_command(f"vllm serve m --hf-overrides.x={value}", engine_version="0.16.0")
    assert launch.options["hf_overrides"] == {"x": value}


@pytest.mark.parametrize("text", ["(cd /models && vllm serve ./m)", "( vllm serve m )"])
def test_a_subshell_is_refused_not_read_with_its_parenthesis_in_the_model(text):
    # "(cd /x && vllm serve m)" was read as the model "m)" and the program "(cd".
    with pytest.raises(CommandLineError, match="subshell"):
        parse_command(text)


def test_command_substitution_is_still_a_word():
    launch = parse_command("vllm serve m --tensor-parallel-size $(nproc)", engine_version="0.16.0")
    assert launch.model == "m"


def test_deeply_nested_json_flag_value_is_a_rejected_value_not_a_crash():
    from servepilot.engines.cmdline import parse_command

    launch = parse_command(["vllm", "serve", "m", "--hf-overrides", "[" * 100_000], engine_version="0.16.0")
    assert launch.rejected and "hf_overrides" in launch.rejected[0]
