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
