"""Probe this machine: GPUs (through hardware/nvml.py), /dev/shm, the command's port, torch.

    probe_cluster(port=8000, cuda_visible_devices="0,1")
"""

from __future__ import annotations

import errno
import os
import socket

from servepilot.hardware.catalog import match_nvml_name, precision_for
from servepilot.hardware.cluster import Cluster, Gpu
from servepilot.hardware.nvml import NvmlDevice, read_nvml

NO_GPU_NOTE = ("no GPU found on this machine and no --gpu given: "
               "pass --gpu NAME[xN] (e.g. --gpu h200x8) to reason about the target GPUs")


def probe_cluster(
    *,
    port: int | None = None,
    host: str | None = None,
    cuda_visible_devices: str | None = None,
    shm_path: str = "/dev/shm",
) -> Cluster:
    """The GPUs and host facts of this machine, as the engine would see them."""
    report = read_nvml()
    notes = list(report.notes)
    gpus = tuple(_gpu(d) for d in report.devices)
    if cuda_visible_devices is not None:
        gpus, visible_notes = apply_visible_devices(gpus, report.devices, cuda_visible_devices)
        notes += visible_notes
    extra: dict = {}
    if port is not None:
        extra["port"] = port
        extra["port_host"] = host or "0.0.0.0"
        extra["port_free"], why = port_free(host, port)
        if why:
            notes.append(why)
    if report.error:
        notes.append(report.error)
    if not gpus:
        notes.append(NO_GPU_NOTE)
    return Cluster(
        gpus=gpus,
        source="probe" if report.devices else "none",
        driver_version=report.driver_version,
        cuda_driver_version=report.cuda_driver_version,
        topology=_topology(report.devices, gpus),
        shm_bytes=shm_bytes(shm_path),
        torch_cuda_arch_list=torch_arch_list(),
        notes=tuple(notes),
        extra=extra,
    )


def _gpu(d: NvmlDevice) -> Gpu:
    model = match_nvml_name(d.name, d.memory_total) if d.name else None
    cc = d.compute_capability or (model.compute_capability if model else None)
    fp8, fp4 = (model.fp8, model.fp4) if model else precision_for(cc)
    return Gpu(
        index=d.index,
        name=d.name or "?",
        key=model.key if model else None,
        memory_bytes=d.memory_total or 0,
        compute_capability=cc,
        fp8=fp8,
        fp4=fp4,
        bandwidth_gbps=model.bandwidth_gbps if model else None,
        nvlink=d.nvlinks_active > 0 if d.error is None else None,
        error=d.error,
    )


def apply_visible_devices(gpus: tuple[Gpu, ...], devices, value: str) -> tuple[tuple[Gpu, ...], list[str]]:
    """The GPUs CUDA_VISIBLE_DEVICES leaves visible, in its order.

    Entries are indices or (prefixes of) UUIDs; as CUDA does, the list ends at the first entry
    that names no device, and an empty value hides every GPU.
    """
    entries = [e.strip() for e in value.split(",") if e.strip()]
    by_index = {g.index: g for g in gpus}
    uuid_of = {d.index: d.uuid or "" for d in devices}
    out: list[Gpu] = []
    notes: list[str] = []
    for entry in entries:
        match = None
        if entry.lstrip("-").isdigit():
            match = by_index.get(int(entry))
        else:
            found = [i for i, u in uuid_of.items() if u and u.startswith(entry)]
            match = by_index.get(found[0]) if len(found) == 1 else None
        if match is None:
            notes.append(f"CUDA_VISIBLE_DEVICES={value}: {entry!r} names no GPU here, so CUDA ignores it and the "
                         "entries after it")
            break
        if match not in out:
            out.append(match)
    notes.append(f"CUDA_VISIBLE_DEVICES={value}: {len(out)} of {len(gpus)} GPUs visible to the engine")
    return tuple(out), notes


def _topology(devices: tuple[NvmlDevice, ...], gpus: tuple[Gpu, ...]) -> str | None:
    if len(gpus) < 2:
        return None
    if all(g.nvlink for g in gpus):
        return "nvlink"
    if any(g.nvlink for g in gpus):
        return "mixed"
    return "pcie"


def shm_bytes(path: str = "/dev/shm") -> int | None:
    """Size of the shared-memory filesystem (NCCL and the engines' IPC need it; Docker's default is 64 MiB)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_frsize * st.f_blocks


def port_free(host: str | None, port: int) -> tuple[bool | None, str | None]:
    """Whether the engine could bind host:port now (None when it cannot be told here).

    SO_REUSEADDR is set as uvicorn sets it, so a port in TIME_WAIT reads as free.
    """
    address = host or "0.0.0.0"
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, int(port)))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False, None
            if exc.errno == errno.EACCES:
                return None, f"port {port}: binding needs privileges here ({exc.strerror})"
            return None, f"port {port} on {address}: cannot test here ({exc.strerror})"
    return True, None


def torch_arch_list() -> tuple[str, ...] | None:
    """torch.cuda.get_arch_list() when torch is installed (the sm_XX it was built for)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch  # heavy; imported only when present and asked for
    except Exception:  # a broken torch install must not stop the probe
        return None
    try:
        return tuple(torch.cuda.get_arch_list())
    except Exception:
        return None
