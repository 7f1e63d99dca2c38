"""`servepilot deployment [--gpu] [--engine-version] [--command-file] [--json] -- CMD`:
show how servepilot understands an engine command line and the GPUs it will run on."""

from __future__ import annotations

import click

from servepilot.cli.common import (
    ENGINE_COMMAND_SETTINGS,
    JSON_OPTION,
    build_deployment_from_cli,
    multinode_options,
)


@click.command("deployment", context_settings=ENGINE_COMMAND_SETTINGS)
@multinode_options
@JSON_OPTION
def deployment(command, gpu, engine_version, command_file, nodes, ray_address, as_json) -> int:
    """Show what servepilot understood: engine and version, model, parallelism, KV dtype,
    port, environment, log file, remote host, GPUs and flags it does not know.

    \b
    Examples:
      servepilot deployment --gpu rtx-pro-6000x8 -- vllm serve /models/kimi -tp 8
      servepilot deployment -- "NCCL_PROTO=LL nohup vllm serve /m --port 8001 > log 2>&1 &"
      servepilot deployment --command-file launch.sh --json
    """
    from servepilot.multinode import is_multinode

    if is_multinode(command_file, nodes, ray_address):  # world size, ranks per node, API node
        from servepilot.cli.multinode_views import deployment_set

        return deployment_set(command, command_file, nodes, ray_address, gpu, engine_version, as_json)
    d = build_deployment_from_cli(command, gpu, engine_version, command_file)
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(d.JSON_SCHEMA, d.to_json())
    else:
        render_text(d)
    return 0


def _spec_line(spec) -> str:
    if spec is None:
        return "not inspected"
    from servepilot.cli.output import human_bytes

    parts = [" · ".join(spec.architectures) or spec.format, f"family {spec.family or '?'}"]
    if spec.attention is not None:
        parts.append(f"{spec.attention.kind.upper()} {spec.attention.num_layers} layers")
    if spec.quant is not None:
        parts.append(f"quant {spec.quant.method}" + (f" {spec.quant.quant_algo}" if spec.quant.quant_algo else ""))
    if spec.kv_cache is not None:
        parts.append(f"checkpoint KV {spec.kv_cache.dtype} ({spec.kv_cache.where})")
    if spec.weights is not None and spec.weights.total_bytes:
        parts.append(f"weights {human_bytes(spec.weights.total_bytes)}")
    return " · ".join(parts)


def _gpu_lines(cluster) -> list[str]:
    from servepilot.cli.output import human_bytes

    if not cluster.gpus:
        return ["none"]
    groups: dict[tuple, list[int]] = {}
    for g in cluster.gpus:
        arch = g.gfx_arch if g.gfx_arch else f"CC {g.cc_str}"  # AMD GPUs: the LLVM target
        label = f"{g.name} · {arch} · {human_bytes(g.memory_bytes)}"
        if g.fp8 is not None:
            label += f" · FP8 {'yes' if g.fp8 else 'no'} · FP4 {'yes' if g.fp4 else 'no'}"
        if g.fp8_formats:
            label += f" ({', '.join(g.fp8_formats)})"
        if g.error:
            label += f" · ERROR {g.error}"
        groups.setdefault((label,), []).append(g.index)
    lines = [f"{len(ix)}x {label[0]}  (index {','.join(map(str, ix))})" for label, ix in groups.items()]
    facts = [f"source {cluster.source}"]
    if cluster.topology:
        facts.append(f"link {cluster.topology}")
    if cluster.driver_version:
        facts.append(f"driver {cluster.driver_version} (CUDA {cluster.cuda_driver_version or '?'})")
    lines.append(" · ".join(facts))
    return lines


def text_rows(d) -> list[tuple[str, str]]:
    """(label, value) rows of the text view."""
    from servepilot.cli.output import human_bytes
    from servepilot.engines.cmdline import render_command

    launch = d.launch
    version = launch.engine_version or "unknown"
    if d.extra.get("engine_version_source"):
        version += f" ({d.extra['engine_version_source']})"
    rows = [("engine",
             f"{launch.engine} {version} · {launch.program}"), ("model",
                                                                launch.model or "?"), ("spec", _spec_line(d.spec))]
    c = d.extra.get("container")
    if c:
        gpus = c["gpus"] or "none"
        shm = "host (--ipc=host)" if c["ipc_host"] else (human_bytes(c["shm_bytes"]) if c["shm_bytes"] else "unlimited")
        rows.append(("container", f"{c['runtime']} {c['image']} · GPUs {gpus} · /dev/shm {shm}"))
    shown = []
    key_options = launch.record.key_options
    for name in key_options:
        if name in launch.options and launch.options[name] is not None:
            mark = "" if name in launch.explicit else " (default)"
            shown.append(f"{name}={launch.options[name]}{mark}")
    rows.append(("options", ", ".join(shown) or "-"))
    others = sorted(k for k in launch.explicit if k not in key_options and k != "model")
    if others:
        rows.append(("other flags", ", ".join(f"{k}={launch.options.get(k)}" for k in others)))
    if launch.unknown_flags:
        rows.append(("unknown flags", " ".join(launch.unknown_flags)))
    s = launch.shell
    if s.env:
        rows.append(("env", " ".join(f"{k}={v}" for k, v in s.env.items())))
    if s.stdout_file or s.stderr_file:
        mode = "appends to" if s.append else "writes"
        rows.append(("log file", f"{mode} {s.stdout_file or '-'} (stderr: {s.stderr_file or 'terminal'})"))
    if s.ssh_host:
        rows.append(("remote host", s.ssh_host))
    if s.nohup or s.background:
        rows.append(("runs",
                     " · ".join(x for x in ("nohup" if s.nohup else "",
                                            "background (&)" if s.background else "") if x)))
    if launch.config_file:
        rows.append(("config file", launch.config_file))
    for i, line in enumerate(_gpu_lines(d.cluster)):
        rows.append(("gpus" if i == 0 else "", line))
    c = d.cluster
    host_facts = []
    if c.shm_bytes is not None:
        host_facts.append(f"/dev/shm {human_bytes(c.shm_bytes)}")
    if "port_free" in c.extra:
        free = {True: "free", False: "IN USE", None: "unknown"}[c.extra["port_free"]]
        host_facts.append(f"port {c.extra.get('port')} {free}")
    if c.torch_cuda_arch_list:
        host_facts.append("torch archs " + " ".join(c.torch_cuda_arch_list))
    if host_facts:
        rows.append(("host", " · ".join(host_facts)))
    rows.append(("command", render_command(launch)))
    for i, note in enumerate((*d.notes, *c.notes)):
        rows.append(("notes" if i == 0 else "", note))
    return rows


def render_text(d) -> None:
    from servepilot.cli.output import print_rows

    print_rows(text_rows(d))
