"""Time the cluster preflight on Ray's single-machine test cluster (no GPU needed).

A CPU-only head and two nodes with fake GPUs (8 + 4, their own environments, node B with a
checkpoint copy one byte short and NCCL_SOCKET_IFNAME=ib0), as in
tests/multinode/test_ray_preflight.py. Prints: cluster start, first preflight (workers start),
a warm preflight, the 16-GPU infeasible placement, and a node removed after discovery
(reported unreachable; the time until the report). Needs `pip install 'servepilot[ray]'`.

    python bench/bench_preflight_ray.py
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path


def _shard(path: Path, size: int) -> None:
    header = json.dumps({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}).encode()
    header += b" " * (-len(header) % 8)
    body = len(header).to_bytes(8, "little") + header
    path.write_bytes(body + b"\0" * (size - len(body)))


def _checkpoint(root: Path, short: bool) -> str:
    root.mkdir()
    (root / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    _shard(root / "model-00001-of-00002.safetensors", 1000)
    _shard(root / "model-00002-of-00002.safetensors", 999 if short else 1000)
    return str(root)


def main() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.cluster_utils import Cluster

    from servepilot.multinode import raytransport as rt
    from servepilot.multinode.analysis import analyze_command_set
    from servepilot.multinode.preflight import preflight_on_ray

    base = Path(tempfile.mkdtemp(prefix="sp-bench-preflight-"))
    good, bad = _checkpoint(base / "good", False), _checkpoint(base / "bad", True)

    def env(root, **extra):
        return {"SERVEPILOT_PROBE_OVERRIDES": json.dumps({"checkpoint_root": root}), **extra}

    t0 = time.monotonic()
    c = Cluster(initialize_head=True, connect=True,
                head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False, "env_vars": env(good)})
    try:
        c.add_node(num_cpus=1, num_gpus=8, resources={"sp_node_a": 1}, env_vars=env(good))
        c.add_node(num_cpus=1, num_gpus=4, resources={"sp_node_b": 1}, env_vars=env(bad, NCCL_SOCKET_IFNAME="ib0"))
        c.wait_for_nodes()
        print(f"cluster (head + 2 nodes) ready: {time.monotonic() - t0:.1f} s")

        def run(tp, pp, timeout=60.0, discovered=None):
            a = analyze_command_set(["vllm", "serve", "/nonexistent/m", "-tp", str(tp), "-pp", str(pp),
                                     "--distributed-executor-backend", "ray"], ray_address=c.address)
            start = time.monotonic()
            report = preflight_on_ray(a, c.address, timeout_s=timeout, discovered=discovered)
            return report, time.monotonic() - start

        for label in ("first preflight (12-GPU plan)", "warm preflight (12-GPU plan)"):
            report, took = run(4, 3)
            found = sorted((f.check, f.nodes) for f in report.findings)
            print(f"{label}: {took:.1f} s, findings {found}, placed {report.placement['per_node']}")
        report, took = run(8, 2)
        print(f"16-GPU plan on 8 + 4: {took:.1f} s, "
              f"{[f.finding.title for f in report.findings if f.check == 'placement.infeasible']}")
        extra = c.add_node(num_cpus=1, num_gpus=1, resources={"sp_node_c": 1})
        c.wait_for_nodes()
        nodes = rt.discover()
        c.remove_node(extra, allow_graceful=False)
        report, took = run(4, 3, timeout=12.0, discovered=nodes)
        lost = [f.nodes for f in report.findings if f.check == "node.unreachable"]
        print(f"node removed after discovery: reported {lost} after {took:.1f} s, exit code {report.exit_code}")
    finally:
        ray.shutdown()
        c.shutdown()
    print(f"total: {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
