"""`servepilot probe`: what one node of a multi-node deployment looks like, as JSON.

Host name and addresses, interfaces and their state (psutil), the route to the head, the
networking environment (VLLM_HOST_IP, NCCL_*, GLOO_*), GPUs and driver (hardware/nvml.py),
package versions (importlib.metadata: nothing heavy is imported), /dev/shm and `ulimit -l`,
InfiniBand ports (/sys/class/infiniband), a checkpoint manifest, the head's ports, the time.

    probe_host(model="/models/kimi", head="10.0.0.1", ports=(29501,))

Everything is collected, never raised: a part that cannot be read says why under "errors".
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from pathlib import Path

from servepilot.hardware.nvml import read_nvml

SCHEMA = "servepilot.probe/1"
# The distributions whose versions must agree across nodes (research notes §3 class 4).
VERSIONED_PACKAGES = ("vllm", "sglang", "torch", "ray", "nvidia-nccl-cu12", "nvidia-nccl-cu13",
                      "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime", "flashinfer-python", "transformers")
ENV_PREFIXES = ("NCCL_", "GLOO_", "VLLM_HOST_IP", "TP_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR",
                "MASTER_PORT", "RAY_ADDRESS", "SGLANG_HOST_IP")
# Files hashed whole in the manifest; shards are hashed by their header only (8-byte length
# + JSON), which names every tensor, its dtype, shape and offsets: a partial copy differs there
# or in its size, without reading hundreds of GB of weights.
CONFIG_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
                "hf_quant_config.json", "quantization_config.json", "model.safetensors.index.json")
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit on a header
CONNECT_TIMEOUT_S = 1.5


def probe_host(model: str | None = None, head: str | None = None, ports: tuple[int, ...] = (),
               infiniband_root: str = "/sys/class/infiniband", shm_path: str = "/dev/shm") -> dict:
    """Everything this node can say about itself, as one JSON-ready dict."""
    errors: dict[str, str] = {}
    overrides = _overrides(errors)
    checkpoint_root = overrides.pop("checkpoint_root", None)
    out = {
        "schema": SCHEMA,
        "host": {"hostname": socket.gethostname(), "fqdn": _safe(socket.getfqdn, errors, "fqdn")},
        "interfaces": _interfaces(errors),
        "route": _route(head, errors) if head else None,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "gpus": _gpus(),
        "versions": _versions(),
        "shm": _shm(shm_path, errors),
        "memlock": _memlock(),
        "infiniband": _infiniband(Path(infiniband_root), errors),
        "checkpoint": _manifest(model, checkpoint_root, errors) if model else None,
        "reach": [_connect(head, p) for p in ports] if head else [],
        "time": time.time(),
        "errors": errors,
        "overridden": sorted(overrides) + (["checkpoint_root"] if checkpoint_root else []),
    }
    _merge(out, overrides)
    out["time"] = time.time()  # last: the preflight reads the clock offset against its receipt
    return out


def _safe(fn, errors, key):
    try:
        return fn()
    except OSError as exc:
        errors[key] = str(exc)
        return None


def _overrides(errors: dict) -> dict:
    from servepilot.settings import probe_overrides_text

    text = probe_overrides_text()
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        errors["overrides"] = f"SERVEPILOT_PROBE_OVERRIDES is not JSON: {exc.msg}"
        return {}
    if not isinstance(data, dict):
        errors["overrides"] = "SERVEPILOT_PROBE_OVERRIDES must be a JSON object"
        return {}
    return data


def _merge(into: dict, over: dict) -> None:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _interfaces(errors: dict) -> dict:
    """name -> {up, mtu, speed_mbps, addresses: [{family, address}]}."""
    import psutil

    try:
        addrs = psutil.net_if_addrs()
        stats = psutil.net_if_stats()
    except OSError as exc:
        errors["interfaces"] = str(exc)
        return {}
    out = {}
    for name in sorted(set(addrs) | set(stats)):
        st = stats.get(name)
        out[name] = {
            "up": bool(st.isup) if st else None,
            "mtu": st.mtu if st else None,
            "speed_mbps": st.speed if st else None,
            "addresses": [{"family": _family(a.family), "address": a.address.split("%")[0]}
                          for a in addrs.get(name, ()) if _family(a.family) in ("ipv4", "ipv6")],
        }
    return out


def _family(family) -> str:
    return {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}.get(family, "other")


def _route(head: str, errors: dict) -> dict | None:
    """The source address (and so the interface) this node uses to reach `head`: a UDP
    socket's connect picks the route without sending a packet."""
    host = head.rsplit(":", 1)[0] if head.count(":") == 1 else head
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            source = s.getsockname()[0]
    except OSError as exc:
        errors["route"] = f"no route to {host}: {exc}"
        return None
    return {"head": host, "source_address": source}


def _gpus() -> dict:
    r = read_nvml()
    return {
        "count": len(r.devices),
        "visible_count": _visible(len(r.devices)),
        "driver_version": r.driver_version,
        "cuda_driver_version": r.cuda_driver_version,
        "devices": [{"index": d.index, "name": d.name, "memory_bytes": d.memory_total,
                     "compute_capability": ".".join(map(str, d.compute_capability)) if d.compute_capability else None}
                    for d in r.devices],
        "error": r.error,
    }


def _visible(count: int) -> int | None:
    """GPUs left by CUDA_VISIBLE_DEVICES (None when unset): indices or UUIDs, comma-separated;
    CUDA stops at the first entry that names no device."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    seen = 0
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or (entry.isdigit() and int(entry) >= count) or entry.startswith("-"):
            break
        seen += 1
    return seen


def _versions() -> dict:
    import platform
    from importlib import metadata

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _shm(path: str, errors: dict) -> dict | None:
    import shutil

    try:
        u = shutil.disk_usage(path)
    except OSError as exc:
        errors["shm"] = f"{path}: {exc.strerror or exc}"
        return None
    return {"path": path, "total_bytes": u.total, "free_bytes": u.free}


def _memlock() -> int | None:
    """`ulimit -l` in bytes; -1 for unlimited (what RDMA wants)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return -1 if soft == resource.RLIM_INFINITY else int(soft)


def _infiniband(root: Path, errors: dict) -> list[dict]:
    if not root.is_dir():
        return []
    out = []
    for dev in sorted(root.iterdir()):
        ports = []
        for port in sorted((dev / "ports").glob("*")):
            ports.append({"port": port.name, "state": _read(port / "state"),
                          "link_layer": _read(port / "link_layer"), "rate": _read(port / "rate")})
        out.append({"device": dev.name, "ports": ports})
    return out


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _manifest(model: str, checkpoint_root: str | None, errors: dict) -> dict:
    """Names and sizes of the checkpoint's files, hashes of its configs and shard headers."""
    where = Path(checkpoint_root or os.path.expanduser(model))
    out: dict = {"model": model, "path": str(where), "exists": where.exists(), "files": {}}
    if not where.exists() and not checkpoint_root:
        from servepilot.checkpoint.hub import looks_like_model_id

        if looks_like_model_id(model):
            from servepilot.errors import BadInput

            try:
                from servepilot.checkpoint.hub import resolve_model_id

                where = resolve_model_id(model)
                out.update(path=str(where), exists=True)
            except BadInput as exc:
                out["error"] = exc.one_line()
    if not where.is_dir():
        if where.is_file():
            out["files"][where.name] = _entry(where)
        return out
    for path in sorted(where.iterdir()):
        if path.is_file() and (path.suffix in (".safetensors", ".json", ".gguf", ".model", ".py", ".txt")):
            try:
                out["files"][path.name] = _entry(path)
            except OSError as exc:
                errors[f"checkpoint:{path.name}"] = str(exc)
    return out


def _entry(path: Path) -> dict:
    size = path.stat().st_size
    entry: dict = {"size": size}
    if path.name in CONFIG_FILES or (path.suffix == ".json" and size <= 1 << 20):
        entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    elif path.suffix == ".safetensors":
        entry["header_sha256"] = _header_hash(path)
    return entry


def _header_hash(path: Path) -> str | None:
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            return None
        n = int.from_bytes(raw, "little")
        if n > MAX_HEADER_BYTES:
            return None
        return hashlib.sha256(raw + f.read(n)).hexdigest()


def _connect(head: str, port: int) -> dict:
    host = head.rsplit(":", 1)[0] if head.count(":") == 1 else head
    start = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            state = "open"
    except TimeoutError:
        state = "timeout"
    except ConnectionRefusedError:
        state = "refused"
    except OSError as exc:
        state = f"error: {exc.strerror or exc}"
    return {"host": host, "port": port, "state": state, "ms": round((time.monotonic() - start) * 1000, 1)}
