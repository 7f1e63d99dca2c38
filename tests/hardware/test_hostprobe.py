"""`servepilot probe`: the node's own facts, real where this machine has them."""

from __future__ import annotations

import json

from servepilot.cli.main import main
from servepilot.hardware.hostprobe import probe_host


def _shard(path, header: dict, pad: int = 16) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * pad)


def test_probe_reads_this_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    monkeypatch.delenv("SERVEPILOT_PROBE_OVERRIDES", raising=False)
    p = probe_host(head="127.0.0.1", ports=(1,))
    assert p["schema"] == "servepilot.probe/1"
    assert "lo" in p["interfaces"] and any(a["address"] == "127.0.0.1" for a in p["interfaces"]["lo"]["addresses"])
    assert p["route"]["source_address"] == "127.0.0.1"
    assert p["env"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert p["versions"]["python"].count(".") == 2
    assert p["shm"]["total_bytes"] > 0
    assert p["reach"][0]["state"] in ("refused", "timeout") or p["reach"][0]["state"].startswith("error")


def test_manifest_hashes_shard_headers_and_sizes(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVEPILOT_PROBE_OVERRIDES", raising=False)
    (tmp_path / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    _shard(tmp_path / "model.safetensors", {"w": {"dtype": "U8", "shape": [16], "data_offsets": [0, 16]}})
    first = probe_host(model=str(tmp_path))["checkpoint"]["files"]
    _shard(tmp_path / "model.safetensors", {"w": {"dtype": "U8", "shape": [4, 4], "data_offsets": [0, 16]}})
    second = probe_host(model=str(tmp_path))["checkpoint"]["files"]
    assert first["config.json"]["sha256"] == second["config.json"]["sha256"]
    assert first["model.safetensors"]["header_sha256"] != second["model.safetensors"]["header_sha256"]
    assert second["model.safetensors"]["size"] == (tmp_path / "model.safetensors").stat().st_size
    assert first["model.safetensors"]["size"] != second["model.safetensors"]["size"]


def test_infiniband_ports_from_sysfs_tree(tmp_path, monkeypatch):
    monkeypatch.delenv("SERVEPILOT_PROBE_OVERRIDES", raising=False)
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n", encoding="utf-8")
    (port / "link_layer").write_text("InfiniBand\n", encoding="utf-8")
    p = probe_host(infiniband_root=str(tmp_path))
    assert p["infiniband"] == [{"device": "mlx5_0", "ports": [
        {"port": "1", "state": "4: ACTIVE", "link_layer": "InfiniBand", "rate": None}]}]


def test_overrides_are_merged_and_listed(monkeypatch, tmp_path):
    monkeypatch.setenv("SERVEPILOT_PROBE_OVERRIDES",
                       json.dumps({"gpus": {"count": 8}, "checkpoint_root": str(tmp_path)}))
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    p = probe_host(model="/elsewhere/model")
    assert p["gpus"]["count"] == 8 and "driver_version" in p["gpus"]
    assert p["checkpoint"]["path"] == str(tmp_path) and "config.json" in p["checkpoint"]["files"]
    assert p["overridden"] == ["gpus", "checkpoint_root"]


def test_bad_overrides_are_reported_not_raised(monkeypatch):
    monkeypatch.setenv("SERVEPILOT_PROBE_OVERRIDES", "{oops")
    assert "not JSON" in probe_host()["errors"]["overrides"]


def test_probe_cli_json_and_text(capsys, monkeypatch):
    monkeypatch.delenv("SERVEPILOT_PROBE_OVERRIDES", raising=False)
    assert main(["probe", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "servepilot.probe/1"
    assert main(["probe"]) == 0
    assert "interfaces up" in capsys.readouterr().out


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    from servepilot.hardware.hostprobe import _visible

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert _visible(8) == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,9,1")  # CUDA stops at the first index with no device
    assert _visible(8) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert _visible(8) == 0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _visible(8) is None
