"""The engine's own argument parser: what it refuses before it loads anything."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule


@rule(
    "SP-ARGS-001", "other", "The engine's argument parser refuses the command",
    facts=(
        "vLLM and SGLang parse their command line with argparse: an unrecognized flag, a value that does not convert "
        "(e.g. --max-num-seqs abc, --kv-cache-memory-bytes 20GiB) or a missing value stops the process with exit code 2 "
        "('error: unrecognized arguments: ...') before the model is read.",
        "Flags come and go between releases: --disable-log-requests is gone from vLLM 0.18.0 (request logging is off "
        "by default since the --enable-log-requests switch of PR #21739).",
    ),
    sources=(
        "vllm/entrypoints/cli/main.py@v0.16.0 (parser.parse_args)",
        "vllm/engine/arg_utils.py@v0.18.0 (no disable-log-requests)",
        "https://github.com/vllm-project/vllm/pull/21739",
        "sglang/srt/server_args.py@v0.5.10.post1 (prepare_server_args)",
    ),
)
def parser_rejects(dep, ctx) -> list[Finding]:
    rejected = getattr(dep.launch, "rejected", ())
    if not rejected:
        return []
    version = dep.launch.engine_version
    engine = f"{dep.engine} {version}" if version else dep.engine
    remedies = []
    unset = [flag for flag in dep.launch.unknown_flags if any(f" {flag.split('=')[0]} flag" in r for r in rejected)]
    if unset:
        remedies.append(Remedy(
            "flag", "drop " + " ".join(unset),
            f"none where the flag only changed logging or was a no-op; otherwise find what replaced it in {engine}",
            {"set": {}, "unset": [u.lstrip("-").replace("-", "_") for u in unset]},
        ))
    return [Finding(
        "SP-ARGS-001", "other", "error",
        f"{engine} will refuse the command line at argument parsing",
        "The engine stops within seconds, before reading the checkpoint:\n" + "\n".join(f"  - {r}" for r in rejected),
        tuple(Evidence(r, "servepilot's flag table for this release (engines/*/knowledge/flags.json)") for r in rejected),
        tuple(remedies),
    )]
