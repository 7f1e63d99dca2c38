"""Engine commands inside docker compose files and Kubernetes manifests.

`docker compose -f FILE up [SERVICE]` (what `--compose FILE [--service NAME]` stands for)
reads the service's image, entrypoint/command, environment, ports, volumes, ipc, shm_size
and GPU reservations. `kubectl apply -f FILE` (what `--manifest FILE` stands for) reads the
pod template of a Deployment, StatefulSet, DaemonSet, Job, Pod, LeaderWorkerSet (leader
template), KServe InferenceService (predictor containers) or RayService (head group):
container command and args with $(VAR) expansion, env, volume mounts (hostPath volumes give
host paths; a memory emptyDir at /dev/shm gives the shm size), nvidia.com/gpu limits.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath

from servepilot.engines.containers import DOCKER_DEFAULT_SHM, Container, engine_in_image, parse_size
from servepilot.errors import BadInput, CommandLineError

COMPOSE_FILES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")
# The service or container to take when a file holds several engines (set by --service).
SERVICE_VARIABLE = "SERVEPILOT_SERVICE"


def is_compose_up(argv: Sequence[str]) -> bool:
    words = list(argv)
    if words[:2] == ["docker", "compose"] or words[:2] == ["podman", "compose"]:
        words = words[2:]
    elif words[:1] == ["docker-compose"] or words[:1] == ["podman-compose"]:
        words = words[1:]
    else:
        return False
    return "up" in words


def is_kubectl_apply(argv: Sequence[str]) -> bool:
    return len(argv) >= 3 and PurePosixPath(argv[0]).name in ("kubectl", "oc") and argv[1] in ("apply", "create")


def compose_command(path: str, service: str | None) -> list[str]:
    return ["docker", "compose", "-f", path, "up", *([service] if service else [])]


def manifest_command(path: str, service: str | None) -> list[str]:
    return ([f"{SERVICE_VARIABLE}={service}"] if service else []) + ["kubectl", "apply", "-f", path]


def _load_yaml(path: str, what: str, many: bool = False):
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        from servepilot.errors import unreadable_file

        raise unreadable_file(exc, what, path) from None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None] if many else yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadInput(f"{what} is not valid YAML: {getattr(exc, 'problem', exc)}", path=path) from None


# ---- docker compose ---------------------------------------------------------------------


def split_compose(argv: Sequence[str], is_engine: Callable, env: dict):
    words = list(argv)
    files = [words[k + 1] for k, w in enumerate(words[:-1]) if w in ("-f", "--file")]
    up = words.index("up")
    services = [w for w in words[up + 1 :] if not w.startswith("-")]
    path = files[0] if files else next((f for f in COMPOSE_FILES if Path(f).is_file()), None)
    if path is None:
        raise BadInput("no compose file: give --compose FILE (none of compose.yaml, docker-compose.yml here)")
    data = _load_yaml(path, "compose file")
    all_services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(all_services, dict) or not all_services:
        raise BadInput("compose file has no services", path=path)
    names = services or list(all_services)
    for name in names:
        if name not in all_services:
            raise BadInput(f"compose file has no service {name!r} (it has: {', '.join(all_services)})", path=path)
    found = []
    for name in names:
        got = _compose_service(path, name, all_services[name] or {}, is_engine)
        if got is not None:
            found.append((name, got))
    if not found:
        raise CommandLineError(f"no service of the compose file runs vLLM, SGLang or llama.cpp ({', '.join(names)})",
                               path=path)
    if len(found) > 1:
        raise CommandLineError(f"several services run an engine ({', '.join(n for n, _ in found)})",
                               path=path, hint="name one with --service NAME")
    name, (argv_out, container) = found[0]
    return argv_out, replace(container, wrapper=tuple(words), source=f"{path} (service {name})")


def _interpolate(value, env: dict):
    """Compose's ${VAR}, ${VAR:-default} and $VAR from the environment."""
    if isinstance(value, list):
        return [_interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        default = m.group(2)
        got = env.get(name, os.environ.get(name))
        return got if got not in (None, "") else (default or "")

    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)", sub, value)


def _words(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


def _compose_service(path: str, name: str, svc: dict, is_engine):
    base = Path(path).resolve().parent
    image = str(svc.get("image") or "")
    opts: list[tuple[str, str | None]] = []
    environment = svc.get("environment") or {}
    items = environment.items() if isinstance(environment, dict) else (
        (e.split("=", 1) + [""])[:2] if "=" in e else (e, None) for e in map(str, environment))
    for k, v in items:
        opts.append(("-e", f"{k}={'' if v is None else v}" if v is not None else str(k)))
    for p in svc.get("ports") or []:
        if isinstance(p, dict):
            opts.append(("-p", f"{p.get('published', '')}:{p.get('target')}".lstrip(":")))
        else:
            opts.append(("-p", str(p)))
    for v in svc.get("volumes") or []:
        if isinstance(v, dict):
            src, dst = str(v.get("source", "")), str(v.get("target", ""))
        else:
            parts = str(v).split(":")
            src, dst = (parts[0], parts[1]) if len(parts) >= 2 else ("", parts[0])
        if src.startswith("."):
            src = str(base / src)
        if src and dst:
            opts.append(("-v", f"{src}:{dst}"))
    if svc.get("ipc"):
        opts.append(("--ipc", str(svc["ipc"])))
    if svc.get("shm_size"):
        opts.append(("--shm-size", str(svc["shm_size"])))
    gpus = _compose_gpus(svc)
    if gpus:
        opts.append(("--gpus", gpus))
    env = {k: v for k, v in os.environ.items()}
    entry = _interpolate(_words(svc.get("entrypoint")), env) or None
    rest = _interpolate(_words(svc.get("command")), env)
    return engine_in_image("compose", image, rest, opts, (), is_engine, entrypoint=entry)


def _compose_gpus(svc: dict) -> str | None:
    """`gpus: all`, or deploy.resources.reservations.devices with driver nvidia / capability gpu."""
    if svc.get("gpus") is not None:
        g = svc["gpus"]
        return "all" if g == "all" else str(len(g) if isinstance(g, list) else g)
    devices = (((svc.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    for d in devices:
        if not isinstance(d, dict) or not (d.get("driver") == "nvidia" or "gpu" in (d.get("capabilities") or [])):
            continue
        if d.get("device_ids"):
            return "device=" + ",".join(str(i) for i in d["device_ids"])
        count = d.get("count", "all")
        return "all" if count == "all" else str(count)
    if svc.get("runtime") == "nvidia":
        return "all"
    return None


# ---- Kubernetes -------------------------------------------------------------------------


def _pod_specs(doc: dict) -> list[tuple[str, dict]]:
    """(workload name, pod spec) of the workloads a manifest document defines."""
    kind = doc.get("kind")
    name = str((doc.get("metadata") or {}).get("name") or kind)
    spec = doc.get("spec") or {}
    if kind == "Pod":
        return [(name, spec)]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return [(name, (spec.get("template") or {}).get("spec") or {})]
    if kind == "LeaderWorkerSet":
        lws = spec.get("leaderWorkerTemplate") or {}
        leader = (lws.get("leaderTemplate") or lws.get("workerTemplate") or {}).get("spec") or {}
        return [(name, leader)]
    if kind == "InferenceService":
        predictor = spec.get("predictor") or {}
        if predictor.get("containers"):
            return [(name, predictor)]
        model = predictor.get("model")
        if isinstance(model, dict) and (model.get("command") or model.get("args")):
            return [(name, {"containers": [model], "volumes": predictor.get("volumes") or []})]
        return []
    if kind == "RayService":
        head = ((spec.get("rayClusterConfig") or {}).get("headGroupSpec") or {}).get("template") or {}
        return [(name, head.get("spec") or {})]
    return []


def split_manifest(argv: Sequence[str], is_engine: Callable, env: dict):
    words = list(argv)
    files = [words[k + 1] for k, w in enumerate(words[:-1]) if w in ("-f", "--filename")]
    if not files:
        raise BadInput("kubectl command without -f FILE: give --manifest FILE")
    path = files[0]
    docs = _load_yaml(path, "manifest", many=True)
    wanted = env.get(SERVICE_VARIABLE)
    found = []
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        for workload, pod in _pod_specs(doc):
            for c in pod.get("containers") or []:
                if wanted and wanted not in (workload, c.get("name")):
                    continue
                got = _k8s_container(path, doc.get("kind"), workload, pod, c, is_engine)
                if got is not None:
                    found.append((f"{doc.get('kind')} {workload}, container {c.get('name')}", got))
    if not found:
        which = f" named {wanted!r}" if wanted else ""
        raise CommandLineError(f"no container{which} in the manifest runs vLLM, SGLang or llama.cpp", path=path)
    if len(found) > 1:
        raise CommandLineError(f"several containers run an engine ({'; '.join(n for n, _ in found)})",
                               path=path, hint="name one with --service NAME")
    where, (argv_out, container) = found[0]
    wrapper = tuple(w for w in words if not w.startswith(SERVICE_VARIABLE + "="))
    return argv_out, replace(container, wrapper=wrapper, source=f"{path} ({where})")


def _k8s_expand(words: list[str], env: dict) -> list[str]:
    """Kubernetes' $(VAR) references to the container's env; $$(VAR) stays literal."""
    def sub(m: re.Match) -> str:
        return env.get(m.group(1), m.group(0))

    return [re.sub(r"(?<!\$)\$\((\w+)\)", sub, w) for w in words]


def _k8s_container(path: str, kind, workload: str, pod: dict, c: dict, is_engine):
    env: dict[str, str] = {}
    notes: list[str] = []
    for e in c.get("env") or []:
        if not isinstance(e, dict) or "name" not in e:
            continue
        if "value" in e:
            env[str(e["name"])] = str(e["value"])
        else:
            env[str(e["name"])] = f"$({e['name']})"
            notes.append(f"env {e['name']} comes from a secret or field reference: its value is unknown here")
    opts: list[tuple[str, str | None]] = [("-e", f"{k}={v}") for k, v in env.items()]
    volumes = {v.get("name"): v for v in pod.get("volumes") or [] if isinstance(v, dict)}
    shm = DOCKER_DEFAULT_SHM
    shm_note = True
    for m in c.get("volumeMounts") or []:
        vol = volumes.get(m.get("name")) or {}
        target = str(m.get("mountPath", ""))
        if "hostPath" in vol:
            host = str((vol["hostPath"] or {}).get("path", ""))
            if m.get("subPath"):
                host = str(PurePosixPath(host) / m["subPath"])
            opts.append(("-v", f"{host}:{target}"))
        elif "persistentVolumeClaim" in vol:
            claim = (vol["persistentVolumeClaim"] or {}).get("claimName")
            notes.append(f"{target} is the volume claim {claim!r}: the checkpoint there is not readable from here")
        if target == "/dev/shm" and "emptyDir" in vol:
            shm_note = False
            limit = (vol["emptyDir"] or {}).get("sizeLimit")
            # A memory emptyDir without a limit may grow to the pod's memory limit.
            shm = parse_size(str(limit), kubernetes=True) if limit else None
            if limit and shm is None:  # the API server refuses it too; None would mean "no limit"
                from servepilot.errors import BadInput

                raise BadInput(f"/dev/shm emptyDir sizeLimit {limit!r} is not a Kubernetes quantity (e.g. 16Gi)",
                               path=path)
    if shm_note:
        notes.append("no emptyDir mounted at /dev/shm: the container's /dev/shm is the runtime's 64 MiB default")
    resources = c.get("resources") or {}
    count = (resources.get("limits") or {}).get("nvidia.com/gpu") or (resources.get("requests") or {}).get(
        "nvidia.com/gpu")
    if count is not None:
        opts.append(("--gpus", str(count)))
    for p in c.get("ports") or []:
        if isinstance(p, dict) and p.get("containerPort"):
            opts.append(("-p", f"{p['containerPort']}:{p['containerPort']}"))
    command = _k8s_expand(_words(c.get("command")), env)
    args = _k8s_expand(_words(c.get("args")), env)
    got = engine_in_image("kubernetes", str(c.get("image") or ""), args, opts, (), is_engine,
                          entrypoint=command or None)
    if got is None:
        return None
    argv, container = got
    kept = [n for n in container.notes if "shm" not in n and "64 MiB" not in n]
    if kind == "LeaderWorkerSet":
        notes.append("LeaderWorkerSet: the leader's command is read; workers join it over the network")
    return argv, replace(container, shm_bytes=shm, ipc_host=False, notes=tuple(kept + notes))


def wrapped_engine(argv: Sequence[str], is_engine: Callable, env: dict) -> tuple[list[str], Container] | None:
    """(engine argv, Container) when `argv` runs an engine in a container, a compose service
    or a Kubernetes manifest; None when it is none of those."""
    from servepilot.engines.containers import is_container_run, split_container_run

    if is_container_run(argv):
        return split_container_run(argv, is_engine)
    if is_compose_up(argv):
        return split_compose(argv, is_engine, env)
    if is_kubectl_apply(argv):
        return split_manifest(argv, is_engine, env)
    return None
