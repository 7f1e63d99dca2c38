"""Supervised engine runs: launch, follow, probe, diagnose, stop; run directories and history.

Called from other layers:
    servepilot.runs.store.latest_measurement(model, engine, gpu_key) -> dict | None
        the newest figures an engine logged for this model/engine/GPU kind (the planner)

Used by the CLI (cli/runs_cmd.py):
    launch.prepare_launch(command, gpu=, engine_version=, command_file=, force=) -> LaunchPlan
    launch.start_run(plan, name=) -> Run;  launch.Supervisor(run).wait_ready() -> Outcome
    manage.list_runs(), manage.stop_run(ref, grace_s), manage.history(model), manage.resolve_run(ref)
    shm.scan(dir), shm.remove_leftovers(entries, dir)

Everything this package needs from deployment, checks, planning, triage and overlay goes
through runs/integration.py, which degrades cleanly when one of them is missing.
"""
