"""The engine's own argument parser: what it refuses before it loads anything."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import ANY_PLATFORM, rule


@rule(
    "SP-ARGS-001", "other", "The engine's argument parser refuses the command",
    facts=(
        "vLLM and SGLang parse their command line with argparse: an unrecognized flag, a value that does not convert "
        "(e.g. --max-num-seqs abc, --kv-cache-memory-bytes 20GiB) or a missing value stops the process with exit code "
        "2 "
        "('error: unrecognized arguments: ...') before the model is read.",
        "Flags come and go between releases: --disable-log-requests is gone from vLLM 0.18.0 (request logging is off "
        "by default since the --enable-log-requests switch of PR #21739).",
    ),
    sources=(
        "vllm/entrypoints/cli/main.py@v0.16.0 (parser.parse_args)",
        "vllm/engine/arg_utils.py@v0.18.0 (no disable-log-requests)",
        "https://github.com/vllm-project/vllm/pull/21739",
        "sglang/srt/server_args.py@v0.5.10.post1 (prepare_server_args)",
    ), platforms=ANY_PLATFORM,
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
        tuple(Evidence(r,
                       "servepilot's flag table for this release (engines/*/knowledge/flags.json)") for r in rejected),
        tuple(remedies),
    )]


@rule(
    "SP-ARGS-002", "other", "A flag value the engine refuses before loading",
    facts=(
        "Beyond its type, a flag's value must be one of the field's choices (a Literal type: --dtype, "
        "--quantization, --kv-cache-dtype, --block-size) or inside the field's bounds (pydantic Field gt/ge/le/lt: "
        "--gpu-memory-utilization in (0, 1]); argparse or the config's validation stops the engine within seconds.",
        "The port must fit in 16 bits; tensor and pipeline parallel sizes must be at least 1.",
        "Choices and bounds are generated per release from the engine's own field definitions (engines/flaggen.py); "
        "releases older than the first one read are checked only against the rules that hold for all.",
    ),
    sources=(
        "vllm/engine/arg_utils.py@v0.16.0 (EngineArgs annotations; get_kwargs turns a Literal into choices)",
        "vllm/config/cache.py@v0.16.0 (gpu_memory_utilization: Field(gt=0, le=1))",
        "vllm/model_executor/layers/quantization/__init__.py@v0.16.0 (QuantizationMethods)",
    ), platforms=ANY_PLATFORM,
)
def value_out_of_range(dep, ctx) -> list[Finding]:
    from servepilot.engines.flagtable import value_problems

    launch = dep.launch
    problems = value_problems(dep.engine, launch.engine_version, dict(launch.options), launch.explicit)
    if not problems:
        return []
    version = launch.engine_version
    engine = f"{dep.engine} {version}" if version else dep.engine
    lines = [f"--{dest.replace('_', '-')}: {problem}" for dest, problem, _ in problems]
    remedies = tuple(
        Remedy("flag", f"drop --{dest.replace('_', '-')} (the engine's default) or give an accepted value",
               "the default may differ from what was meant", {"set": {}, "unset": [dest]})
        for dest, _, _ in problems
    )
    return [Finding(
        "SP-ARGS-002", "other", "error",
        f"{engine} refuses {len(problems)} flag value(s) before loading anything",
        "\n".join(f"  - {line}" for line in lines),
        tuple(Evidence(f"{dest}: {rule.range_text or 'choices'}", rule.source) for dest, _, rule in problems),
        remedies,
    )]
