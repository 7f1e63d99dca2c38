"""The preflight on Ray's single-machine test cluster: a CPU-only head and two nodes with
fake GPUs (8 + 4) and their own environments; one cluster for the whole module.

Every simulated node shares this host's NICs and disk, so each node's own checkpoint copy
is simulated through SERVEPILOT_PROBE_OVERRIDES {"checkpoint_root": ...} in that node's
raylet environment (the probe reports the override). The tests never call `ray stop` and
signal nothing: the Cluster object starts and ends its own processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.slow
MODEL = "/nonexistent/sp-multinode-model"  # the path the command names; each node reads its copy


def _shard(path, size: int) -> None:
    header = json.dumps({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}).encode()
    header += b" " * (-len(header) % 8)
    body = len(header).to_bytes(8, "little") + header
    path.write_bytes(body + b"\0" * (size - len(body)))


def _checkpoint(root, short: bool):
    root.mkdir()
    (root / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    _shard(root / "model-00001-of-00002.safetensors", 1000)
    _shard(root / "model-00002-of-00002.safetensors", 999 if short else 1000)
    return str(root)


def _overrides(root: str) -> str:
    return json.dumps({"checkpoint_root": root})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    base = tmp_path_factory.mktemp("ckpt")
    good, bad = _checkpoint(base / "good", False), _checkpoint(base / "bad", True)
    c = cluster_utils.Cluster(initialize_head=True, connect=True, head_node_args={
        "num_cpus": 1, "num_gpus": 0, "include_dashboard": False,
        "env_vars": {"SERVEPILOT_PROBE_OVERRIDES": _overrides(good)}})
    try:
        c.add_node(num_cpus=1, num_gpus=8, resources={"sp_node_a": 1},
                   env_vars={"SERVEPILOT_PROBE_OVERRIDES": _overrides(good)})
        c.add_node(num_cpus=1, num_gpus=4, resources={"sp_node_b": 1},
                   env_vars={"SERVEPILOT_PROBE_OVERRIDES": _overrides(bad), "NCCL_SOCKET_IFNAME": "ib0"})
        c.wait_for_nodes()
        yield {"cluster": c, "address": c.address, "good": good, "bad": bad}
    finally:
        ray.shutdown()
        c.shutdown()


def _analysis(address: str, tp: int, pp: int):
    from servepilot.multinode.analysis import analyze_command_set

    return analyze_command_set(
        ["vllm", "serve", MODEL, "-tp", str(tp), "-pp", str(pp), "--distributed-executor-backend", "ray"],
        ray_address=address)


def _ids(report):
    return sorted((f.check, f.nodes) for f in report.findings)


def test_short_shard_and_missing_interface_found_on_that_node_only(cluster):
    from servepilot.multinode.preflight import preflight_on_ray

    report = preflight_on_ray(_analysis(cluster["address"], 4, 3), cluster["address"], timeout_s=60)
    assert len(report.nodes) == 3 and len({n.node_id for n in report.nodes}) == 3
    assert [n.gpus for n in report.nodes] == [0, 8, 4]
    assert _ids(report) == [("checkpoint.size_mismatch", ("node2",)), ("nccl.ifname_missing", ("node2",))]
    size = next(f for f in report.findings if f.check == "checkpoint.size_mismatch")
    assert "model-00002-of-00002.safetensors: 999 bytes" in size.finding.detail
    assert [n.status for n in report.nodes] == ["PASS", "PASS", "FAIL"]
    assert report.placement["feasible"] and report.placement["per_node"] == {"node1": 8, "node2": 4}
    assert report.exit_code == 1


def test_sixteen_gpu_plan_on_eight_plus_four_is_infeasible_with_counts(cluster):
    from servepilot.multinode.preflight import preflight_on_ray

    report = preflight_on_ray(_analysis(cluster["address"], 8, 2), cluster["address"], timeout_s=60)
    placement = [f for f in report.findings if f.check == "placement.infeasible"]
    assert len(placement) == 1
    assert "node1: 8 + node2: 4" in placement[0].finding.detail
    assert placement[0].finding.title == "16 GPU bundles cannot be placed on 12 GPUs"
    assert ray.util.placement_group_table() == {} or all(
        pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())


def test_merge_of_probe_files_gives_the_ray_findings(cluster, tmp_path):
    from servepilot.multinode.preflight import preflight_from_files, preflight_on_ray

    a = _analysis(cluster["address"], 4, 3)
    via_ray = preflight_on_ray(a, cluster["address"], timeout_s=60)
    host, port = cluster["address"].rsplit(":", 1)
    files = []
    envs = [{"SERVEPILOT_PROBE_OVERRIDES": _overrides(cluster["good"])},
            {"SERVEPILOT_PROBE_OVERRIDES": _overrides(cluster["good"])},
            {"SERVEPILOT_PROBE_OVERRIDES": _overrides(cluster["bad"]), "NCCL_SOCKET_IFNAME": "ib0"}]
    for k, extra in enumerate(envs):
        env = {k2: v for k2, v in os.environ.items() if not k2.startswith(("NCCL_", "SERVEPILOT_PROBE"))}
        out = subprocess.run([sys.executable, "-c", "from servepilot.cli.main import run; run()", "probe", "--json",
                              "--model", MODEL,
                              "--head", host, "--port", port], env=env | extra, capture_output=True, text=True,
                             check=True)
        path = tmp_path / f"node{k}.json"
        path.write_text(out.stdout, encoding="utf-8")
        files.append(str(path))
    merged = preflight_from_files(a, files)
    assert _ids(merged) == _ids(via_ray)


def test_preflight_and_check_cli_on_the_ray_cluster(cluster, capsys):
    from servepilot.cli.main import main

    cmd = ["--", "vllm", "serve", MODEL, "-tp", "8", "-pp", "2", "--distributed-executor-backend", "ray"]
    assert main(["preflight", "--ray-address", cluster["address"], "--timeout", "60", "--json", *cmd]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "servepilot.preflight/1" and out["transport"] == "ray"
    assert [n["status"] for n in out["nodes"]] == ["PASS", "FAIL", "FAIL"]
    assert out["placement"] == {"feasible": False, "bundles": 16, "per_node": None,
                                "gpus": {"node0": 0, "node1": 8, "node2": 4}}
    # the same from a fresh process: servepilot joins the cluster as a driver of its own
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
    run = subprocess.run([sys.executable, "-c", "from servepilot.cli.main import run; run()", "preflight",
                          "--ray-address", cluster["address"], "--timeout", "60", *cmd], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr[-2000:]
    assert "placement.infeasible" in run.stdout and "node2   FAIL" in run.stdout
    # check reads the GPU nodes from the cluster: 8 + 4 GPUs for a 16-worker plan
    assert main(["check", "--ray-address", cluster["address"], "--json", *cmd]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["multinode"]["node_count"] == 2
    assert [(n["name"], n["ranks"]) for n in out["multinode"]["nodes"]] == [("node0", 8), ("node1", 4)]
    assert [f["check"] for f in out["findings"] if "check" in f] == ["node.gpu_product"]


def test_node_removed_after_discovery_is_unreachable_within_20s(cluster):
    from servepilot.multinode import raytransport as rt
    from servepilot.multinode.preflight import preflight_on_ray

    c = cluster["cluster"]
    extra = c.add_node(num_cpus=1, num_gpus=1, resources={"sp_node_c": 1})
    c.wait_for_nodes()
    nodes = rt.discover()
    gone = next(n for n in nodes if "sp_node_c" in n.resources)
    c.remove_node(extra, allow_graceful=False)
    start = time.monotonic()
    report = preflight_on_ray(_analysis(cluster["address"], 4, 3), cluster["address"], timeout_s=12,
                              discovered=nodes)
    elapsed = time.monotonic() - start
    lost = [f for f in report.findings if f.check == "node.unreachable"]
    name = f"node{nodes.index(gone)}"
    assert [f.nodes for f in lost] == [(name,)]
    assert report.exit_code == 1
    assert elapsed < 20, f"preflight took {elapsed:.1f} s"
