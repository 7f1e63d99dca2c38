import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path

import pytest
from patience import PATIENCE_S

from servepilot.errors import BadInput
from servepilot.runs import launch, manage, process, store, tree
from servepilot.runs.environment import REDACTED


def _start(cmd, **kw):
    plan = launch.prepare_launch(cmd, force=True)
    run = launch.start_run(plan, name=kw.pop("name", None))
    return run, launch.Supervisor(run, **kw)


def _finish(run):
    """Never leave a process behind, whatever the test did."""
    if run.proc.poll() is None:
        tree.stop_tree(run.identity, run_id=None, run_dir=None, grace_s=2)
    run.proc.wait(PATIENCE_S)
    assert process.group_members(run.identity.pgid, not_before=run.identity.start_time) == []


def _row(run_id):
    db = store.connect()
    try:
        return store.get_run(db, run_id)
    finally:
        db.close()


def test_ready_then_stop(fake_cmd, port):
    events = []
    run, sup = _start(fake_cmd(), name="fake", on_event=events.append, ready_timeout_s=PATIENCE_S)
    try:
        out = sup.wait_ready()
        assert out.state == "ready", out
        assert out.url == f"http://127.0.0.1:{port}"
        assert out.served_models == ("fake-model",)
        assert _row(run.run_id)["state"] == "ready"
        assert _row(run.run_id)["served_model"] == "fake-model"
        assert [r.state for r in manage.list_runs()] == ["ready"]
        stopped = manage.stop_run("fake", grace_s=5)
        assert stopped.state == "stopped"
        run.proc.wait(PATIENCE_S)
        assert process.group_members(run.identity.pgid, not_before=run.identity.start_time) == []
        record = json.loads((run.run_dir / "run.json").read_text())
        assert record["state"] == "stopped" and record["pid"] == run.identity.pid
        assert record["pid_start_time"] == run.identity.start_time
    finally:
        _finish(run)


def test_health_less_server_is_ready_through_v1_models(fake_cmd):
    run, sup = _start(fake_cmd("--no-health"), ready_timeout_s=PATIENCE_S)
    try:
        assert sup.wait_ready().state == "ready"
    finally:
        _finish(run)


def test_exit_before_ready_is_diagnosed_within_a_second(fake_cmd, tmp_path):
    log = tmp_path / "canned.log"
    log.write_text("INFO Starting\nTraceback (most recent call last):\nValueError: Model path does not exist: /nope\n")
    run, sup = _start(fake_cmd("--log", str(log), "--exit", "1"), ready_timeout_s=PATIENCE_S)
    try:
        out = sup.wait_ready()
        done = time.time()
        assert out.state == "failed" and out.exit_code == 1
        assert out.reason == "exited with code 1"
        assert out.diagnosis["root_cause"]["category"] in ("other", "unsupported_arch")
        assert done - out.exited_at < 1.0
        row = _row(run.run_id)
        assert row["state"] == "failed" and row["exit_code"] == 1
        assert row["diagnosis_json"]["root_cause"]["category"] == row["category"]
        assert "ValueError" in (run.run_dir / "server.log").read_text()
    finally:
        _finish(run)


def test_fatal_line_then_hang_is_stopped(fake_cmd, tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "FATAL_SETTLE_S", 0.3)
    log = tmp_path / "canned.log"
    log.write_text("ERROR [core.py:1] RuntimeError: Engine core initialization failed. See root cause above.\n")
    run, sup = _start(fake_cmd("--log", str(log), "--hang", "--child"), ready_timeout_s=PATIENCE_S)
    try:
        out = sup.wait_ready()
        assert out.state == "failed"
        assert "fatal line" in out.reason
        assert out.exit_code == -15  # our SIGTERM, collected before the outcome was recorded
        run.proc.wait(PATIENCE_S)
        assert process.group_members(run.identity.pgid, not_before=run.identity.start_time) == []
    finally:
        _finish(run)


def test_ready_timeout_stops_the_group(fake_cmd):
    run, sup = _start(fake_cmd("--hang"), ready_timeout_s=0.5)
    try:
        out = sup.wait_ready()
        assert out.state == "failed" and out.reason.startswith("not ready after 0.5 s")
    finally:
        _finish(run)


def test_someone_elses_server_on_the_port_is_not_mistaken_for_ours(fake_cmd, port):
    other = __import__("subprocess").Popen(
        [sys.executable, str(Path(__file__).with_name("fake_engine.py")), "--port", str(port)],
        stdout=__import__("subprocess").DEVNULL,
    )
    try:
        deadline = time.monotonic() + PATIENCE_S
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        # Ours lives 1.5 s before trying to bind (and failing): plenty of probe chances.
        run, sup = _start(fake_cmd("--delay", "1.5"), ready_timeout_s=PATIENCE_S)
        try:
            out = sup.wait_ready()
            assert out.state == "failed", out
            assert "Address already in use" in (run.run_dir / "server.log").read_text()
        finally:
            _finish(run)
    finally:
        other.kill()
        other.wait()


def test_ssh_wrapped_command_is_refused():
    with pytest.raises(BadInput, match="ssh"):
        launch.prepare_launch(["ssh root@gpu-box 'vllm serve /models/x --port 8000'"], force=True)


def test_shell_redirections_are_dropped_and_said(fake_cmd, tmp_path):
    stray = tmp_path / "stray.log"
    line = shlex.join(fake_cmd("--exit", "0")) + f" > {stray} 2>&1 &"
    plan = launch.prepare_launch([f"nohup {line}"], force=True)
    assert any("dropped" in n and str(stray) in n for n in plan.notes)
    run = launch.start_run(plan)
    try:
        out = launch.Supervisor(run, ready_timeout_s=PATIENCE_S).wait_ready()
        assert out.state == "failed" and out.exit_code == 0
        assert "exiting with 0" in (run.run_dir / "server.log").read_text()
        assert not stray.exists()
    finally:
        _finish(run)


def test_command_environment_reaches_the_engine_but_not_the_record(tmp_path):
    code = "import os; print('token', os.environ['HF_TOKEN'], 'mode', os.environ['MODE'])"
    cmd = f"HF_TOKEN=hf_supersecret MODE=fast {shlex.quote(sys.executable)} -c {shlex.quote(code)} --api-key sk-abc"
    plan = launch.prepare_launch([cmd], force=True)
    run = launch.start_run(plan)
    try:
        launch.Supervisor(run, ready_timeout_s=PATIENCE_S).wait_ready()
        assert "token hf_supersecret mode fast" in (run.run_dir / "server.log").read_text()
        for name in ("run.json", "command.txt"):
            text = (run.run_dir / name).read_text()
            assert "hf_supersecret" not in text and "sk-abc" not in text, name
        record = json.loads((run.run_dir / "run.json").read_text())
        assert record["env"]["HF_TOKEN"] == REDACTED and record["env"]["MODE"] == "fast"
        assert record["cwd"] == str(Path.cwd().resolve())
        row = _row(run.run_id)
        assert "hf_supersecret" not in json.dumps(row)
    finally:
        _finish(run)


def test_a_secret_in_a_shell_prefix_stays_out_of_the_record(tmp_path, monkeypatch):
    # `export HF_TOKEN=...; vllm serve`: the prefix is listed in the record's `dropped` words
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c 'print(1)'\n")
    (bin_dir / "vllm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    cmd = "export HF_TOKEN=hf_prefixsecret; vllm serve examples/llama-3.1-8b --port 1"
    plan = launch.prepare_launch([cmd], force=True)
    run = launch.start_run(plan)
    try:
        launch.Supervisor(run, ready_timeout_s=PATIENCE_S).wait_ready()
        record = json.loads((run.run_dir / "run.json").read_text())
        assert record["dropped"] and "hf_prefixsecret" not in json.dumps(record)
    finally:
        _finish(run)


def test_every_attempt_gets_its_own_directory_and_log(fake_cmd):
    runs = []
    for _ in range(3):
        run, sup = _start(fake_cmd("--exit", "2"), name="same", ready_timeout_s=PATIENCE_S)
        runs.append(run)
        sup.wait_ready()
        _finish(run)
    assert len({r.run_dir for r in runs}) == 3
    assert all((r.run_dir / "server.log").read_text().count("exiting with 2") == 1 for r in runs)


def test_ready_run_stores_the_measured_figures_for_the_planner(fake_cmd, tmp_path, monkeypatch):
    from servepilot.runs import integration

    log = tmp_path / "canned.log"
    log.write_text(
        "(EngineCore_DP0 pid=1) INFO [core.py:1] Initializing a V1 LLM engine (v0.16.0) with config: model='/m'\n"
        "(Worker_TP0 pid=1) INFO [gpu_model_runner.py:1] Model loading took 15.50 GiB memory and 20.1 seconds\n"
        "(Worker_TP0 pid=1) INFO [gpu_worker.py:1] Available KV cache memory: 52.25 GiB\n"
        "(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1] GPU KV cache size: 427,984 tokens\n"
        "(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1] Maximum concurrency for 32,768 tokens per request: 13.06x\n"
    )
    argv = fake_cmd("--log", str(log))
    real = integration.unchecked_command

    def as_vllm(command, gpu, engine_version, command_file, force=False):
        cmd = real(command, command_file, engine_version)
        return integration.dataclasses.replace(cmd, engine="vllm", model="/models/llama-8b", gpu_key="h200",
                                               options={"tensor_parallel_size": 2})

    monkeypatch.setattr(integration, "build_launch_command", as_vllm)
    run, sup = _start(argv, ready_timeout_s=PATIENCE_S)
    try:
        out = sup.wait_ready()
        assert out.state == "ready"
    finally:
        _finish(run)
    got = store.latest_measurement("/models/llama-8b", "vllm", "h200")
    assert got == {
        "available_kv_bytes": int(52.25 * 1024**3), "kv_tokens": 427_984, "weights_bytes": int(15.5 * 1024**3),
        "max_concurrency": 13.06, "max_model_len": 32_768, "tp": 2, "kv_cache_dtype": None, "run_id": run.run_id,
    }
    assert _row(run.run_id)["engine_version"] == "0.16.0"  # learned from the log


def test_logs_prints_the_run_log(fake_cmd, tmp_path, capsys):
    from servepilot.cli.main import main

    run, sup = _start(fake_cmd("--exit", "4"), name="logged", ready_timeout_s=PATIENCE_S)
    sup.wait_ready()
    _finish(run)
    assert main(["logs", "logged"]) == 0
    assert "fake engine: exiting with 4" in capsys.readouterr().out
    assert main(["logs", "logged", "-f"]) == 0  # a dead run: prints and returns
    assert "exiting with 4" in capsys.readouterr().out


def test_a_stop_from_another_shell_during_start_is_reported_as_stopped(fake_cmd):
    import threading

    run, sup = _start(fake_cmd("--hang"), name="slow", ready_timeout_s=PATIENCE_S)
    stopper = threading.Timer(0.5, lambda: manage.stop_run("slow", grace_s=5))
    stopper.start()
    try:
        out = sup.wait_ready()
        assert out.state == "stopped" and "servepilot stop" in out.reason
        assert _row(run.run_id)["state"] == "stopped"
    finally:
        stopper.join()
        _finish(run)


def test_an_engine_whose_first_process_exits_0_but_whose_group_serves_is_followed(fake_cmd):
    # A launcher script that backgrounds the server and returns (`engine & exit 0`): the
    # leader is gone, the group serves. That is a ready run, and stop must still reach it.
    run, sup = _start(["sh", "-c", '"$@" & exit 0', "sh", *fake_cmd()], name="bg", ready_timeout_s=PATIENCE_S)
    try:
        out = sup.wait_ready()
        assert out.state == "ready", out
        assert run.proc.poll() == 0
        assert [r.state for r in manage.list_runs()] == ["ready"]
        assert manage.stop_run("bg", grace_s=5).state == "stopped"
    finally:
        _finish(run)


def test_a_failed_engine_leaves_no_orphaned_worker_behind(fake_cmd, tmp_path):
    # The leader fails (exit 1) while a worker it started lives on holding its GPU memory
    # (vLLM's orphaned workers): the failure is recorded and the worker stopped.
    inner = shlex.join([sys.executable, "-c", "import time; time.sleep(600)"]) + " & sleep 0.5; exit 3"
    run, sup = _start(["sh", "-c", inner], ready_timeout_s=PATIENCE_S)
    try:
        out = sup.wait_ready()
        assert out.state == "failed" and out.exit_code == 3, out
        assert process.group_members(run.identity.pgid, not_before=run.identity.start_time) == []
        assert "left" in out.reason
    finally:
        _finish(run)


def test_an_error_right_after_the_start_stops_the_engine_it_started(fake_cmd, monkeypatch):
    # Ctrl-C (or a locked history database) between the spawn and the record of its pid
    # left an engine running that no record could name, so no `stop` could reach it.
    spawned = []
    real_spawn = process.spawn

    def spawn_and_remember(*a, **kw):
        proc, ident = real_spawn(*a, **kw)
        spawned.append((proc, ident))
        return proc, ident

    real_update = store.update_run

    def update_interrupted(db, run_id, **fields):
        if "pid" in fields:
            raise KeyboardInterrupt
        return real_update(db, run_id, **fields)

    monkeypatch.setattr(process, "spawn", spawn_and_remember)
    monkeypatch.setattr(store, "update_run", update_interrupted)
    plan = launch.prepare_launch(fake_cmd(), force=True)
    with pytest.raises(KeyboardInterrupt):
        launch.start_run(plan)
    (proc, ident), = spawned
    assert proc.wait(PATIENCE_S) is not None
    assert process.group_members(ident.pgid, not_before=ident.start_time) == []


def test_a_secret_the_engine_echoes_into_its_log_stays_out_of_the_diagnosis_record(tmp_path):
    # vLLM logs its non-default args at start-up, --api-key included; the failure excerpt
    # triage keeps (run.json, the history) must not carry the key the record redacted.
    code = ("import os, sys; key = sys.argv[sys.argv.index('--api-key') + 1]; "
            "print(\"INFO non-default args: {'api_key': [%r]}\" % key); "
            "print('ValueError:', key, os.environ['HF_TOKEN'], 'rejected', file=sys.stderr); sys.exit(1)")
    cmd = f"HF_TOKEN=hf_LEAKME456 {shlex.quote(sys.executable)} -c {shlex.quote(code)} --api-key sk-LEAKME123"
    plan = launch.prepare_launch([cmd], force=True)
    run = launch.start_run(plan)
    try:
        out = launch.Supervisor(run, ready_timeout_s=PATIENCE_S).wait_ready()
        assert out.state == "failed"
        assert "LEAKME" in (run.run_dir / "server.log").read_text()  # the engine's own log keeps it
        assert "LEAKME" not in (run.run_dir / "run.json").read_text()
        assert "LEAKME" not in json.dumps(_row(run.run_id), default=str)
        assert "LEAKME" not in json.dumps(out.diagnosis, default=str)
    finally:
        _finish(run)


def test_dropped_prefix_commands_are_shown_as_written(tmp_path):
    # The shell layer keeps each prefix with its separator ("pkill -f x;", "sleep 1 &&");
    # the note said "pkill -f x;;" and "sleep 1 &&;" (a `cd` is honoured, not dropped).
    import numpy as np
    from safetensors.numpy import save_file

    from servepilot.runs import integration

    ckpt = tmp_path / "tiny"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
        "vocab_size": 100, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}))
    save_file({"model.embed_tokens.weight": np.zeros((100, 64), dtype=np.float16)}, str(ckpt / "model.safetensors"))
    cmd = integration.build_launch_command([f"pkill -f nothing; sleep 1 && vllm serve {ckpt}"],
                                           "H100", "0.10.1", None)
    assert cmd.dropped == ("pkill -f nothing;", "sleep 1 &&")


def _tiny_checkpoint(root):
    import numpy as np
    from safetensors.numpy import save_file

    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
        "vocab_size": 100, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}))
    save_file({"model.embed_tokens.weight": np.zeros((100, 64), dtype=np.float16)}, str(root / "model.safetensors"))
    return root


def test_a_cd_before_the_engine_is_where_it_runs_and_where_check_reads_the_model(tmp_path, monkeypatch):
    # `cd /models && vllm serve ./kimi` (or a script that cds first): servepilot dropped the
    # cd, so check looked for ./kimi in the operator's directory and the engine started there.
    _tiny_checkpoint(tmp_path / "models" / "tiny")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    plan = launch.prepare_launch([f"cd {tmp_path / 'models'} && vllm serve ./tiny --port 8123"], gpu="H100",
                                 engine_version="0.10.1")
    assert plan.command.cwd == str(tmp_path / "models")
    assert plan.command.deployment.spec is not None
    assert not any(d.startswith("cd ") for d in plan.command.dropped)
    seen = {}

    def fake_spawn(argv, *, env, cwd, log_fd):
        seen["cwd"] = cwd
        raise BadInput("not starting anything in this test")

    monkeypatch.setattr(process, "spawn", fake_spawn)
    with pytest.raises(BadInput):
        launch.start_run(plan)
    assert seen["cwd"] == str(tmp_path / "models")


def test_a_cd_into_a_directory_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(BadInput, match="cd"):
        launch.prepare_launch([f"cd {tmp_path / 'nope'} && vllm serve ./tiny"], gpu="H100", engine_version="0.10.1")


def test_history_records_the_inherited_environment(fake_cmd, monkeypatch):
    # Issue 17, item 3: an exported VLLM_ATTENTION_BACKEND changed what the engine did but
    # was not recorded, so attempt 1 -> 2 showed no change.
    monkeypatch.setenv("HF_TOKEN", "hf_inherited_secret")
    monkeypatch.setenv("UNRELATED_THING", "x")
    ids = []
    for backend in (None, "FLASHINFER", "FLASHINFER"):
        if backend:
            monkeypatch.setenv("VLLM_ATTENTION_BACKEND", backend)
        run, sup = _start(fake_cmd("--exit", "1"), ready_timeout_s=PATIENCE_S)
        sup.wait_ready()
        _finish(run)
        ids.append(run.run_id)
    record = json.loads((run.run_dir / "run.json").read_text())
    assert record["env"]["VLLM_ATTENTION_BACKEND"] == "FLASHINFER"
    assert record["env"]["HF_TOKEN"] == REDACTED  # inherited secrets are redacted too
    assert "UNRELATED_THING" not in record["env"] and "SERVEPILOT_RUN_ID" not in record["env"]
    (group,) = manage.history()
    changes = [a["changes"] for a in group["attempts"]]
    assert changes[1] == {"env": {"added": {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}}}
    assert changes[2] == {}
    assert "hf_inherited_secret" not in json.dumps(manage.history())
