"""The CLI's own contract: version, help, and errors as one line with exit 2."""

import subprocess
import sys
from pathlib import Path

import pytest

from servepilot import __version__
from servepilot.cli.main import COMMANDS, main
from servepilot.errors import CheckpointError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_version_prints_package_version(capsys):
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


def test_help_lists_every_verb_without_importing_them(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in COMMANDS:
        assert verb in out


def test_unknown_verb_is_usage_error_exit_2(capsys):
    assert main(["no-such-verb"]) == 2


def test_library_error_becomes_one_line_exit_2(monkeypatch, capsys):
    import servepilot.cli.main as m

    def boom(*a, **k):
        raise CheckpointError("header is not JSON", path="/x/model.safetensors")

    monkeypatch.setattr(m.cli, "main", boom)
    monkeypatch.delenv("SERVEPILOT_DEBUG", raising=False)
    assert main(["inspect", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["servepilot: error: /x/model.safetensors: header is not JSON"]


def test_version_does_not_import_heavy_modules():
    code = (
        "import sys; from servepilot.cli.main import main; main(['--version']); "
        "heavy = [m for m in ('rich', 'numpy', 'gguf', 'httpx', 'huggingface_hub', 'pynvml') if m in sys.modules]; "
        "print('HEAVY=' + ','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "HEAVY="


def test_every_verb_help_imports_no_heavy_module():
    """`servepilot VERB --help` imports the verb's module: its top must stay light (< 0.15 s start)."""
    code = (
        "import sys; from servepilot.cli.main import COMMANDS, main\n"
        "for verb in COMMANDS: main([verb, '--help'])\n"
        "heavy = [m for m in ('rich', 'numpy', 'gguf', 'httpx', 'huggingface_hub', 'pynvml', 'yaml', 'jsonpatch',"
        " 'psutil', 'sqlite3', 'platformdirs') if m in sys.modules]\n"
        "print('HEAVY=' + ','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "HEAVY="


README_CHECK = ["check", "--gpu", "rtx-pro-6000x8", "--engine-version", "0.16.0", "--",
                "vllm", "serve", str(EXAMPLES / "kimi-k2.5-nvfp4"), "--tensor-parallel-size", "8",
                "--trust-remote-code", "--kv-cache-dtype", "auto"]
UNWANTED_IN_CHECK = (
    "rich", "numpy", "gguf", "httpx", "huggingface_hub", "pynvml", "psutil", "yaml", "sqlite3",
    "pickle", "shutil", "concurrent.futures", "servepilot.multinode.analysis",
    "servepilot.multinode.commandset", "servepilot.multinode.topology",
    "servepilot.planning.sglang", "servepilot.planning.llamacpp", "servepilot.overlay",
    "servepilot.triage", "servepilot.runs.launch",
)


def test_single_node_check_imports_only_what_it_needs():
    """`check` on the README command (compiled data cache warm, no run history): no YAML parser,
    no SQLite, no multi-node layer, no other engine's planner, no fork or Hub-fetch machinery,
    no heavy optional library. (The port is probed even with named GPUs, issue 17: a busy port
    must be seen whatever the source of the GPU facts, so `socket` is expected.)
    bench/bench_startup.py measures what this keeps cheap."""
    code = (
        "import sys; from servepilot.cli.main import main\n"
        f"rc = main({README_CHECK!r})\n"
        f"loaded = [m for m in {UNWANTED_IN_CHECK!r} if m in sys.modules]\n"
        "print('RC=%s LOADED=%s' % (rc, ','.join(loaded)))"
    )
    for _ in range(2):  # the first run fills the compiled data cache (and may parse YAML)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
    assert out.stdout.strip().splitlines()[-1] == "RC=1 LOADED="


def test_usage_errors_are_one_line_naming_the_verb(capsys):
    assert main(["inspect", "--no-such-option", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--no-such-option" in err[0] and "servepilot inspect --help" in err[0]


def test_missing_argument_is_one_line(capsys):
    assert main(["triage"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "LOG" in err[0]


def test_every_engine_command_verb_reads_the_command_the_same_way():
    # `--` may be left out: the engine's own flags must never be taken for servepilot's
    from servepilot.cli.main import cli

    for verb in ("check", "plan", "fix", "launch", "deployment"):
        command = cli.get_command(None, verb)
        assert command.context_settings.get("ignore_unknown_options") is True, verb
        assert command.context_settings.get("allow_interspersed_args") is False, verb


def test_a_crash_inside_a_verb_is_not_read_as_a_verdict(tmp_path, monkeypatch, capsys):
    """A bug (an unexpected exception) exits 70, never 1 ("the launch will fail") or 2."""
    import servepilot.triage as triage_pkg
    from servepilot.cli.main import INTERNAL_ERROR_EXIT, main

    def broken(*args, **kwargs):
        raise RuntimeError("boom in the reader")

    monkeypatch.delenv("SERVEPILOT_DEBUG", raising=False)
    monkeypatch.setattr(triage_pkg, "triage_file", broken)
    log = tmp_path / "engine.log"
    log.write_text("INFO hello\n")
    assert main(["triage", str(log)]) == INTERNAL_ERROR_EXIT
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]] and "internal error: RuntimeError: boom in the reader" in err[0]

    monkeypatch.setenv("SERVEPILOT_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["triage", str(log)])
