import json

from servepilot.runs.environment import (
    REDACTED,
    environment_diff,
    redact,
    redact_argv,
    run_environment,
)


def test_secret_names_are_redacted_and_others_kept():
    env = {"HF_TOKEN": "hf_abc", "OPENAI_API_KEY": "sk-1", "AWS_SECRET_ACCESS_KEY": "x",
           "DB_PASSWORD": "p", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json", "HTTP_AUTH": "b",
           "CUDA_VISIBLE_DEVICES": "0,1", "VLLM_LOGGING_LEVEL": "DEBUG"}
    out = redact(env)
    for name in ("HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
                 "GOOGLE_APPLICATION_CREDENTIALS", "HTTP_AUTH"):
        assert out[name] == REDACTED, name
    assert out["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert out["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_diff_holds_only_what_the_command_changes_redacted():
    parent = {"PATH": "/bin", "HF_TOKEN": "old", "HOME": "/root"}
    child = run_environment(parent, {"HF_TOKEN": "hf_secret", "VLLM_USE_V1": "1", "PATH": "/bin"})
    diff = environment_diff(parent, child)
    assert diff == {"HF_TOKEN": REDACTED, "VLLM_USE_V1": "1"}
    assert "hf_secret" not in repr(diff)


def test_diff_records_unset_names_as_none():
    assert environment_diff({"A": "1", "B": "2"}, {"A": "1"}) == {"B": None}


def test_secret_flag_values_are_redacted_in_both_forms():
    argv = ["vllm", "serve", "m", "--api-key", "sk-123", "--hf-token=hf_x", "--port", "8000",
            "--enable-auth", "--max-model-len", "4096"]
    out = redact_argv(argv)
    assert "sk-123" not in out and "--hf-token=hf_x" not in out
    assert out[3:5] == ["--api-key", REDACTED]
    assert "--hf-token=" + REDACTED in out
    # A secret-looking boolean flag must not swallow the next flag.
    assert out[-3:] == ["--enable-auth", "--max-model-len", "4096"]
    assert out[6:8] == ["--port", "8000"]


def test_secrets_inside_json_flag_values_are_redacted():
    # vLLM's --hf-overrides (and other JSON flags) can carry a token the record must not keep.
    argv = ["vllm", "serve", "m", "--hf-overrides", '{"hf_token": "hf_SECRET", "rope_theta": 1e6}',
            '--model-loader-extra-config={"nested": {"api_key": "sk-SECRET"}, "n": [1, 2]}']
    out = redact_argv(argv)
    assert "SECRET" not in " ".join(out)
    assert json.loads(out[4]) == {"hf_token": REDACTED, "rope_theta": 1e6}
    name, _, value = out[5].partition("=")
    assert name == "--model-loader-extra-config"
    assert json.loads(value) == {"nested": {"api_key": REDACTED}, "n": [1, 2]}


def test_a_json_value_that_cannot_be_read_is_kept_only_when_it_names_no_secret():
    broken = '{"hf_token": "hf_abc123",'  # truncated: cannot be parsed and re-written
    out = redact_argv(["vllm", "serve", "m", "--hf-overrides", broken, "--speculative-config", "{bad"])
    assert "hf_abc123" not in " ".join(out)
    assert out[-1] == "{bad"


def test_passwords_in_urls_are_redacted_in_argv_and_environment():
    out = redact_argv(["sglang", "--dist-init-addr", "http://bob:pw123@10.0.0.1:5000", "--port", "8000"])
    assert "pw123" not in " ".join(out) and "bob" in out[2] and "10.0.0.1:5000" in out[2]
    diff = environment_diff({}, {"HTTPS_PROXY": "http://bob:pw123@proxy:3128", "NO_PROXY": "localhost"})
    assert "pw123" not in repr(diff)
    assert diff["HTTPS_PROXY"].endswith("@proxy:3128") and diff["NO_PROXY"] == "localhost"


def test_secret_values_are_what_the_record_hides_and_scrub_removes_them():
    from servepilot.runs.environment import scrub, secret_values

    argv = ["vllm", "serve", "m", "--api-key", "sk-abcdef", "--hf-overrides", '{"hf_token": "hf_xyz123"}',
            "--port", "8000"]
    env = {"HF_TOKEN": "hf_envtok", "HTTPS_PROXY": "http://u:pw9876@proxy:1", "MODE": "fast"}
    values = secret_values(argv, env)
    assert {"sk-abcdef", "hf_xyz123", "hf_envtok", "pw9876"} <= values
    assert "8000" not in values and "fast" not in values
    text = {"excerpt": ["key sk-abcdef and hf_envtok", 3], "n": 1}
    assert scrub(text, values) == {"excerpt": [f"key {REDACTED} and {REDACTED}", 3], "n": 1}


def test_tuning_flags_that_merely_contain_token_key_or_auth_are_kept():
    # "TOKEN" in --max-num-batched-tokens, "AUTH" in --author, "KEY" in num_key_value_heads:
    # redacting them hid the very flags history compares between attempts (and made triage
    # scrub every "8192" from the diagnosis).
    argv = ["vllm", "serve", "m", "--max-num-batched-tokens", "8192", "--tokenizer", "/models/tok",
            "--tokenizer-mode", "slow", "--max-new-tokens", "512", "--ssl-keyfile", "/etc/k.pem",
            "--hf-overrides", '{"num_key_value_heads": 8}', "--api-key", "sk-1", "--hf-token", "hf_2"]
    out = redact_argv(argv)
    for kept in ("8192", "/models/tok", "slow", "512", "/etc/k.pem"):
        assert kept in out, kept
    assert json.loads(out[out.index("--hf-overrides") + 1]) == {"num_key_value_heads": 8}
    assert out[-3:] == [REDACTED, "--hf-token", REDACTED]
    env = redact({"TOKENIZERS_PARALLELISM": "false", "KEYBOARD": "us", "MAX_TOKENS": "5",
                  "GITHUB_TOKEN": "g", "APIKEY": "a", "PGPASSWORD": "p", "MYSQL_PWD": "m", "OAUTH": "o",
                  "hfToken": "h", "AWS_SECRET_ACCESS_KEY": "s"})
    assert env["TOKENIZERS_PARALLELISM"] == "false" and env["KEYBOARD"] == "us" and env["MAX_TOKENS"] == "5"
    for name in ("GITHUB_TOKEN", "APIKEY", "PGPASSWORD", "MYSQL_PWD", "OAUTH", "hfToken", "AWS_SECRET_ACCESS_KEY"):
        assert env[name] == REDACTED, name


def test_a_container_commands_environment_assignments_are_redacted_in_argv():
    # launch records the container wrapper too (docker run -e NAME=VALUE ... vllm serve)
    argv = ["docker", "run", "-e", "HF_TOKEN=hf_abc123", "--env=AWS_SECRET_ACCESS_KEY=s3cr3t",
            "-e", "VLLM_LOGGING_LEVEL=DEBUG", "vllm/vllm-openai", "--model", "m"]
    out = redact_argv(argv)
    assert "hf_abc123" not in " ".join(out) and "s3cr3t" not in " ".join(out)
    assert out[3] == "HF_TOKEN=<redacted>" and out[4] == "--env=AWS_SECRET_ACCESS_KEY=<redacted>"
    assert out[6] == "VLLM_LOGGING_LEVEL=DEBUG"  # not a secret: kept for triage
