"""The probe comparator: one probe set per failure class names the class, the node and the
fix; a consistent set gives no finding."""

from __future__ import annotations

import copy
import json

import pytest

from servepilot.cli.main import main
from servepilot.multinode.compare import Expectation, NodeProbe, compare

GiB = 1 << 30


def probe(k: int) -> dict:
    """A healthy node k of a 2 x 8 H200 deployment."""
    return {
        "schema": "servepilot.probe/1",
        "host": {"hostname": f"gpu{k}"},
        "interfaces": {"lo": {"up": True, "addresses": [{"family": "ipv4", "address": "127.0.0.1"}]},
                       "eth0": {"up": True, "addresses": [{"family": "ipv4", "address": f"10.0.0.{k + 1}"}]},
                       "ib0": {"up": True, "addresses": [{"family": "ipv4", "address": f"10.1.0.{k + 1}"}]}},
        "route": {"head": "10.0.0.1", "source_address": f"10.0.0.{k + 1}"},
        "env": {"VLLM_HOST_IP": f"10.0.0.{k + 1}", "NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0",
                "NCCL_IB_HCA": "mlx5_0"},
        "gpus": {"count": 8, "driver_version": "570.86.15", "cuda_driver_version": "12.8",
                 "devices": [{"index": i, "name": "NVIDIA H200", "memory_bytes": 150_000_000_000} for i in range(8)]},
        "versions": {"python": "3.12.3", "vllm": "0.13.0", "torch": "2.9.0", "ray": "2.49.0",
                     "nvidia-nccl-cu12": "2.27.3"},
        "shm": {"path": "/dev/shm", "total_bytes": 64 * GiB, "free_bytes": 64 * GiB},
        "memlock": -1,
        "infiniband": [{"device": "mlx5_0",
                        "ports": [{"port": "1", "state": "4: ACTIVE", "link_layer": "InfiniBand"}]}],
        "checkpoint": {"model": "/models/m", "path": "/models/m", "exists": True,
                       "files": {"config.json": {"size": 1500, "sha256": "aa"},
                                 "model-00001-of-00002.safetensors": {"size": 1000, "header_sha256": "h1"},
                                 "model-00002-of-00002.safetensors": {"size": 1000, "header_sha256": "h2"}}},
        "reach": [{"host": "10.0.0.1", "port": 29501, "state": "refused"}],
        "time": 0.0,
        "errors": {},
        "overridden": [],
    }


EXP = Expectation(model="/models/m", head="10.0.0.1", ports=(29501,), ranks=(8, 8))


def _run(mutate=None, n=3):
    probes = [probe(k) for k in range(n)]
    if mutate:
        mutate(probes)
    return compare(Expectation(model=EXP.model, head=EXP.head, ports=EXP.ports, ranks=(8,) * n),
                   [NodeProbe(f"node{k}", p) for k, p in enumerate(probes)])


def _set(p, path, value):
    *keys, last = path.split("/") if "/" in path else path.split(".")
    for key in keys:
        p = p[key]
    p[last] = value


# class: (mutation of the probes, expected check, failure class[, node, node1 by default])
CLASSES = {
    "ip_nic": (lambda ps: _set(ps[1], "env.VLLM_HOST_IP", "10.9.9.9"), "net.host_ip_not_local", "ip_nic"),
    "rendezvous address not node 0 (sglang#2658)": (
        lambda ps: (_set(ps[0], "interfaces/eth0/addresses", [{"family": "ipv4", "address": "10.0.0.9"}]),
                    _set(ps[0], "env/VLLM_HOST_IP", "10.0.0.9")),
        "net.head_not_node0", "ip_nic", "node0"),
    "route through docker0": (
        lambda ps: (_set(ps[1], "interfaces/docker0", {"up": True, "addresses": [{"family": "ipv4",
                                                                                   "address": "172.17.0.2"}]}),
                    _set(ps[1], "route/source_address", "172.17.0.2")),
        "net.route_virtual_nic", "ip_nic"),
    "CUDA_VISIBLE_DEVICES leaves 4 of 8": (lambda ps: _set(ps[1], "gpus/visible_count",
                                                           4), "gpu.count", "gpu_topology"),
    "rendezvous": (lambda ps: _set(ps[1], "env.NCCL_SOCKET_IFNAME", "ens5"), "nccl.ifname_missing",
                   "rendezvous_network"),
    "port": (lambda ps: _set(ps[1], "reach", [{"host": "10.0.0.1", "port": 29501, "state": "timeout"}]),
             "net.port_unreachable", "rendezvous_network"),
    "rdma": (lambda ps: _set(ps[1], "infiniband", [{"device": "mlx5_0", "ports": [{"port": "1", "state": "1: DOWN"}]}]),
             "ib.port_down", "rdma"),
    "version": (lambda ps: _set(ps[1], "versions.vllm", "0.12.0"), "version.mismatch", "version"),
    "gpu": (lambda ps: _set(ps[1], "gpus.count", 4), "gpu.count", "gpu_topology"),
    "checkpoint": (lambda ps: _set(ps[1], "checkpoint/files/model-00002-of-00002.safetensors",
                                   {"size": 999, "header_sha256": "h2"}), "checkpoint.size_mismatch", "checkpoint"),
    "shm": (lambda ps: _set(ps[1], "shm.free_bytes", 64 << 20), "shm.small", "shm"),
    "clock": (lambda ps: _set(ps[1], "clock_offset_s", 4.5), "clock.skew", "clock"),
}


def test_consistent_probes_give_no_finding():
    assert _run() == []


@pytest.mark.parametrize("name", list(CLASSES))
def test_each_failure_class_names_class_node_and_fix(name):
    mutate, check, klass, *node = CLASSES[name]
    node = node[0] if node else "node1"
    findings = _run(mutate)
    assert [(f.check, f.nodes, f.failure_class) for f in findings] == [(check, (node,), klass)]
    f = findings[0].finding
    assert f.remedies and f.remedies[0].change
    assert node in f.title or node in f.detail or node in f.remedies[0].change or check == "version.mismatch"


def test_majority_decides_which_copy_is_odd():
    def two_bad(ps):
        ps[0]["versions"]["torch"] = "2.8.0"
    findings = _run(two_bad)
    assert [(f.check, f.nodes) for f in findings] == [("version.mismatch", ("node0",))]


def test_ifname_prefix_exclusion_and_exact_forms():
    from servepilot.multinode.compare import interfaces_named

    ifaces = {"eth0": {"up": True}, "ib0": {"up": False}}
    assert interfaces_named("eth", ifaces) == ([], [])
    assert interfaces_named("=eth", ifaces) == (["=eth"], [])
    assert interfaces_named("^docker", ifaces) == ([], [])
    assert interfaces_named("ib", ifaces) == ([], ["ib"])


def test_unreachable_node_fails_with_exit_1():
    from servepilot.multinode.compare import compare as cmp

    findings = cmp(EXP, [NodeProbe("node0", probe(0)), NodeProbe("node1", None, error="no answer within 12 s")])
    assert [(f.check, f.nodes) for f in findings] == [("node.unreachable", ("node1",))]


def _write_probes(tmp_path, probes):
    files = []
    for k, p in enumerate(probes):
        path = tmp_path / f"node{k}.json"
        path.write_text(json.dumps(p), encoding="utf-8")
        files.append(str(path))
    return files


def _cmds(tmp_path):
    files = []
    for k in range(2):
        path = tmp_path / f"node{k}.sh"
        path.write_text(f"vllm serve /models/m -tp 8 -pp 2 --nnodes 2 --node-rank {k} --master-addr 10.0.0.1 "
                        f"--master-port 29501{' --headless' if k else ''}\n", encoding="utf-8")
        files += ["--command-file", str(path)]
    return files


def test_preflight_merge_cli_table_and_json(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "m").mkdir(parents=True)
    ps = [probe(0), probe(1)]
    ps[1]["env"]["NCCL_SOCKET_IFNAME"] = "ens5"
    files = _write_probes(tmp_path, ps)
    args = ["preflight", "--gpu", "h200x8", *_cmds(tmp_path), "--merge", *files]
    assert main([*args, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "servepilot.preflight/1"
    assert [(n["name"], n["status"]) for n in out["nodes"]] == [("node0", "PASS"), ("node1", "FAIL")]
    assert [(f["check"], f["nodes"]) for f in out["findings"]] == [("nccl.ifname_missing", ["node1"])]
    assert main(args) == 1
    text = capsys.readouterr().out
    assert "node1   FAIL" in text and "nccl.ifname_missing" in text


def test_merge_of_consistent_probes_passes(tmp_path, capsys):
    files = _write_probes(tmp_path, [probe(0), probe(1)])
    assert main(["preflight", "--gpu", "h200x8", *_cmds(tmp_path), "--merge", *files, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []


def test_bad_probe_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "node1.json"
    bad.write_text("{not json", encoding="utf-8")
    good = _write_probes(tmp_path, [copy.deepcopy(probe(0))])[0]
    assert main(["preflight", *_cmds(tmp_path), "--merge", good, str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "node1.json" in err[0] and "not JSON" in err[0]


@pytest.mark.parametrize(("key", "value"), [("gpus", None), ("env", []), ("interfaces", {"eth0": None}),
                                            ("infiniband", "mlx5_0"), ("reach", [1]), ("versions", "x"),
                                            ("host", 5), ("gpus", {"count": "8"}),
                                            ("gpus", {"count": 8, "devices": [1]}),
                                            ("infiniband", [{"ports": []}])])
def test_a_probe_field_of_the_wrong_type_is_one_line_exit_2(key, value, tmp_path, capsys):
    # a hand-edited probe file, or one from another servepilot, must not reach the comparator
    ps = [probe(0), probe(1)]
    ps[1][key] = value
    files = _write_probes(tmp_path, ps)
    assert main(["preflight", "--gpu", "h200x8", *_cmds(tmp_path), "--merge", *files]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "node1.json" in err[0] and key in err[0]
