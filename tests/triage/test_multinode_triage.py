"""Multi-node triage: logs of several nodes merged by time; the failure classes' error texts
(quoted from the issues in the research notes) classify to their class and node."""

from __future__ import annotations

import json

import pytest

from servepilot.cli.main import main
from servepilot.triage.multinode import merge_by_time, read_node_lines, triage_nodes

EXCERPTS = {
    "ip_nic": ["Error: No available node types can fulfill resource request {'node:10.0.0.2': 0.001, 'GPU': 1.0}",
               "RuntimeError: Every node should have a unique IP address. Got 2 nodes with 3 unique IP addresses"],
    "rendezvous_network": [
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to "
        "connect to (10.0.0.1, 29500).",
        "misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 169.254.3.1<45678> failed : Software caused "
        "connection abort",
        "Unable to connect to GCS at 10.0.0.1:6379. Check that (1) Ray GCS with matching version started"],
    "rdma": ["NCCL WARN NET/IB : Got completion from peer 10.0.0.2<37543> with error 12, opcode 0, len 0",
             "NCCL WARN Call to ibv_modify_qp failed with error No such device",
             "NCCL INFO Failed to open libibverbs.so[.1]", "NCCL WARN NET/IB : No device found.",
             "NCCL WARN Call to ibv_create_qp failed"],
    "version": ["RuntimeError: Version mismatch: The cluster was started with: Ray: 2.43.0 Python: 3.11.10 "
                "This process on node 10.0.0.2 was started with: Ray: 2.44.1 Python: 3.11.10"],
    "gpu_topology": ["AssertionError: local_world_size (16) must be less than or equal to the number of visible "
                     "devices (8)",
                     "ValueError: Tensor parallel size (16) cannot be larger than the number of available GPUs (8)."],
    "checkpoint": ["OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/models/kimi'"],
    "shm": ["System memory request exceeds memory available in /dev/shm. The request is for 10200547328 bytes, "
            "and the amount available is 9663676416",
            "The object store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes available.",
            "Fatal Python error: Bus error"],
}
CASES = [(klass, text) for klass, texts in EXCERPTS.items() for text in texts]


def test_enough_excerpts():
    assert len(CASES) >= 15


@pytest.mark.parametrize(("klass", "text"), CASES)
def test_excerpt_classifies_to_its_class_and_node(tmp_path, klass, text):
    a = tmp_path / "node0.log"
    b = tmp_path / "node1.log"
    a.write_text("INFO 12-03 08:00:01 [api_server.py:1] vLLM API server version 0.13.0\n", encoding="utf-8")
    b.write_text(f"INFO 12-03 08:00:02 [worker.py:1] starting\nERROR 12-03 08:00:05 [worker.py:9] {text}\n",
                 encoding="utf-8")
    t = triage_nodes([str(a), str(b)])
    assert (t.root_cause.failure_class, t.root_cause.node) == (klass, "node1.log")


def test_ray_prefixed_log_merges_by_time_per_ip(tmp_path):
    log = tmp_path / "ray.log"
    log.write_text(
        "INFO 12-03 08:00:03 [llm_engine.py:1] driver up\n"
        "(RayWorkerWrapper pid=11, ip=10.0.0.2) INFO 12-03 08:00:01 [worker.py:1] worker up\n"
        "(RayWorkerWrapper pid=12, ip=10.0.0.3) INFO 12-03 08:00:02 [worker.py:1] worker up\n"
        "(raylet, ip=10.0.0.3) INFO 12-03 08:00:04 raylet line\n", encoding="utf-8")
    merged = merge_by_time(read_node_lines([str(log)]))
    assert [x.node for x in merged] == ["10.0.0.2", "10.0.0.3", "driver", "10.0.0.3"]
    assert merged[0].text.startswith("INFO 12-03 08:00:01")


def test_one_node_still_loading_is_a_checkpoint_finding(tmp_path, capsys):
    a, b = tmp_path / "node0.log", tmp_path / "node1.log"
    a.write_text("".join(f"[2026-12-03 08:0{k}:00] Loading safetensors checkpoint shards: {k * 20}% Completed | "
                         f"{k * 62 // 5}/62 [00:10<00:00]\n" for k in range(1, 6))
                 + "[2026-12-03 08:06:00] waiting at barrier\n", encoding="utf-8")
    b.write_text("[2026-12-03 08:01:00] Loading safetensors checkpoint shards: 3% Completed | 2/62 [01:00<30:00]\n",
                 encoding="utf-8")
    assert main(["triage", str(a), str(b), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "servepilot.triage-nodes/1"
    rc = out["root_cause"]
    assert (rc["failure_class"], rc["node"], rc["category"]) == ("checkpoint", "node1.log", "node_mismatch")
    assert "2/62" in rc["explanation"]


def test_healthy_logs_give_no_root_cause(tmp_path, capsys):
    a, b = tmp_path / "node0.log", tmp_path / "node1.log"
    a.write_text("INFO 12-03 08:00:01 [api_server.py:1] Application startup complete.\n", encoding="utf-8")
    b.write_text("INFO 12-03 08:00:01 [worker.py:1] ready\n", encoding="utf-8")
    assert main(["triage", str(a), str(b)]) == 0
    assert "no multi-node failure found" in capsys.readouterr().out


def test_one_ray_log_of_two_ips_goes_to_multinode_triage(tmp_path, capsys):
    log = tmp_path / "ray.log"
    log.write_text(
        "(RayWorkerWrapper pid=11, ip=10.0.0.2) INFO 12-03 08:00:01 [worker.py:1] worker up\n"
        "(RayWorkerWrapper pid=12, ip=10.0.0.3) ERROR 12-03 08:00:02 [worker.py:9] RuntimeError: Version mismatch: "
        "The cluster was started with: Ray: 2.43.0 Python: 3.11.10\n", encoding="utf-8")
    assert main(["triage", str(log), "--json"]) == 1
    rc = json.loads(capsys.readouterr().out)["root_cause"]
    assert (rc["failure_class"], rc["node"]) == ("version", "10.0.0.3")
