"""`servepilot probe`: this node, as JSON for `servepilot preflight --merge`."""

from __future__ import annotations

import click

from servepilot.cli.common import JSON_OPTION


@click.command("probe")
@click.option("--model", metavar="PATH", help="Checkpoint to list (names, sizes, config and shard-header hashes).")
@click.option("--head", metavar="HOST", help="The head / rendezvous host: its route and ports are tested.")
@click.option("--port", "ports", type=int, multiple=True, metavar="PORT",
              help="A head port to try (repeatable): Ray GCS 6379, --master-port, --data-parallel-rpc-port.")
@JSON_OPTION
def probe(model, head, ports, as_json) -> int:
    """Describe this node for a multi-node preflight: addresses, interfaces, GPUs, versions,
    /dev/shm, memlock, InfiniBand, a checkpoint manifest, the head's ports, the time.

    \b
    Run it on every node, then compare on any one:
      servepilot probe --model /models/kimi --head 10.0.0.1 --port 29501 --json > node1.json
      servepilot preflight --merge node0.json node1.json --command-file node0.sh --command-file node1.sh
    """
    import json

    from servepilot.hardware.hostprobe import probe_host

    data = probe_host(model=model, head=head, ports=tuple(ports))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return 0
    up = [n for n, i in data["interfaces"].items() if i.get("up")]
    g = data["gpus"]
    rows = [
        ("host", data["host"]["hostname"]),
        ("interfaces up", ", ".join(up) or "none"),
        ("route to head", (data.get("route") or {}).get("source_address") or "-"),
        ("GPUs", f"{g['count']} (driver {g['driver_version'] or '-'})" if g["count"] else (g.get("error") or "none")),
        ("versions", ", ".join(f"{k} {v}" for k, v in data["versions"].items())),
        ("/dev/shm free", f"{(data.get('shm') or {}).get('free_bytes', 0) / (1 << 30):.1f} GiB"),
        ("ulimit -l", "unlimited" if data["memlock"] == -1 else str(data["memlock"])),
        ("InfiniBand", ", ".join(d["device"] for d in data["infiniband"]) or "none"),
        ("env", " ".join(f"{k}={v}" for k, v in data["env"].items()) or "-"),
    ]
    if data.get("checkpoint"):
        ck = data["checkpoint"]
        rows.append(("checkpoint", f"{ck['path']}: {len(ck['files'])} file(s)" if ck["exists"] else f"{ck['path']}: "
                                                                                                    "missing"))
    for r in data["reach"]:
        rows.append((f"{r['host']}:{r['port']}", r["state"]))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        click.echo(f"{k:<{width}}  {v}")
    return 0
