"""Supervised engine runs: launch, follow, probe, diagnose, stop; run directories and history.

Called from other layers:
    servepilot.runs.store.latest_measurement(model, engine, gpu_key) -> dict | None
        the newest figures an engine logged for this model/engine/GPU kind (the planner)

Used by the CLI (cli/runs_cmd.py), which only renders:
    launch.prepare_launch(command, gpu=, engine_version=, command_file=, force=) -> LaunchPlan
    lifecycle.run_launch(plan, name=, detach_when_ready=, ready_timeout_s=, hooks=) -> LaunchEnd
        signals, start, supervise, triage, record, stop on error (the whole launch)
    manage.list_runs(), manage.stop_run(ref, grace_s), manage.history(model), manage.resolve_run(ref)
    shm.scan(dir), shm.remove_leftovers(entries, dir)

A run's processes (group, descendants, marked ones) are runs/tree.py's. What this package
needs from deployment, checks, planning and overlay is imported in runs/integration.py,
from triage in runs/diagnose.py: plain imports, no fallbacks.
"""
