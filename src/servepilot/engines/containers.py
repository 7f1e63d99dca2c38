"""Engines run in containers: `docker run` / `podman run` wrappers around the engine command.

    docker run --gpus all -v /data/models:/models -p 8000:8000 --ipc=host \\
        vllm/vllm-openai:v0.16.0 --model /models/kimi -tp 8

The image says which engine and version run (engines/images.yaml) and which words its
ENTRYPOINT puts before the arguments; the options say which GPUs the container sees, where
the checkpoint lives on the host (-v), which host port serves (-p), how big /dev/shm is
(--ipc=host, --shm-size; Docker's default is 64 MiB) and the container's environment (-e).
The engine's own argv (entrypoint words included) is parsed as usual; the wrapper is kept
so the command renders and launches exactly as written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePosixPath

DOCKER_DEFAULT_SHM = 64 * 2**20  # docker run --shm-size default (podman's too)
RUNTIMES = ("docker", "podman", "nerdctl")
# docker run options that take no value (docker container run --help); every other long
# option takes one (as `--opt value` or `--opt=value`).
_BOOL_LONG = frozenset({"--rm", "--detach", "--interactive", "--tty", "--privileged", "--init", "--read-only",
                        "--publish-all", "--no-healthcheck", "--oom-kill-disable", "--sig-proxy", "--quiet",
                        "--replace", "--http-proxy"})
_BOOL_SHORT = set("ditPq")
UNKNOWN_TAGS = ("latest", "nightly", "dev", "main")


@dataclass(frozen=True)
class Container:
    """How the engine command is wrapped: the runtime, the image and what its options mean."""

    runtime: str  # docker | podman | compose | kubernetes
    image: str
    wrapper: tuple[str, ...] = ()  # words before the engine's own arguments, as written
    implied: int = 0  # entrypoint words of the image at the start of the engine argv (not written)
    engine: str | None = None
    version: str | None = None
    gpus: str | None = None  # as written: "all", "2", "device=0,1", "nvidia.com/gpu=all"; None: none given
    visible_devices: str | None = None  # host GPU indices the container sees; None: all (or unknown)
    gpu_count: int | None = None
    mounts: tuple[tuple[str, str], ...] = ()  # (host path, container path)
    ports: tuple[tuple[str | None, str], ...] = ()  # (host port, container port)
    ipc_host: bool = False
    shm_bytes: int | None = None  # /dev/shm inside; None with --ipc=host (the host's)
    env: dict = field(default_factory=dict)
    source: str | None = None  # the compose file or manifest it came from
    notes: tuple[str, ...] = ()
    inner_shell: tuple[str, ...] = ()  # `bash -c` between the image and the engine command
    # the rest of that script (setup commands, VAR=value, redirections): engines/command.py
    # ShellContext, None without a script
    inner_context: object = None
    detached: bool = False  # `docker run -d`: the client returns at once

    def host_path(self, path: str) -> str | None:
        """The host path behind a path inside the container (longest mount first), else None."""
        p = PurePosixPath(path)
        for host, inside in sorted(self.mounts, key=lambda m: -len(m[1])):
            try:
                rest = p.relative_to(inside)
            except ValueError:
                continue
            if not host.startswith(("/", "~", ".")):
                return None  # a named volume: not a host path
            return str(PurePosixPath(host) / rest) if str(rest) != "." else host
        return None

    @property
    def host_port(self) -> str | None:
        return self.ports[0][0] if self.ports else None

    def run_argv(self, engine_argv: Sequence[str]) -> list[str]:
        """The command `launch` runs and supervises: the words as written. BadInput where the
        command would not stay in the foreground (a manifest, `docker run -d`)."""
        from servepilot.errors import BadInput

        if self.runtime == "kubernetes":
            raise BadInput(f"{self.source or 'the manifest'} runs in a Kubernetes cluster (kubectl apply returns at "
                           "once): servepilot launch supervises processes on this machine",
                           hint="check, plan and deployment read it; follow the pod with kubectl logs")
        if self.detached:
            raise BadInput(f"{self.runtime} run -d returns as soon as the container starts: nothing to supervise",
                           hint="drop -d/--detach; servepilot launch --detach keeps it running in the background")
        return self.words(engine_argv)

    def words(self, engine_argv: Sequence[str]) -> list[str]:
        """The whole command as written: the wrapper, then the engine's own arguments."""
        if self.runtime in ("compose", "kubernetes"):
            return list(self.wrapper)
        args = list(engine_argv[self.implied :])
        if self.inner_shell:
            from servepilot.engines.shell import render_shell

            return [*self.wrapper, *self.inner_shell, render_shell(args, self.inner_context)]
        return [*self.wrapper, *args]


@dataclass(frozen=True)
class ImageFacts:
    engine: str
    entrypoint: tuple[str, ...]
    version: str | None
    note: str | None
    source: str


@lru_cache(maxsize=1)
def _image_table() -> list[dict]:
    from importlib.resources import files

    import yaml

    return yaml.safe_load(files("servepilot.engines").joinpath("images.yaml").read_text(encoding="utf-8"))["images"]


def image_facts(image: str) -> ImageFacts | None:
    """Engine, entrypoint and version of a known engine image (`repo[:tag][@digest]`)."""
    repo, tag = split_image(image)
    for row in _image_table():
        if repo not in row["repositories"]:
            continue
        prefix = row.get("tag_prefix")
        if prefix and not (tag or "").startswith(prefix):
            return None
        version, note = None, None
        m = re.search(row["tag_version"], tag or "")
        if m:
            version = m.group(1)
        elif tag is None or tag in UNKNOWN_TAGS or "@" in image or not m:
            shown = tag or "latest (no tag)"
            note = (f"image {image}: tag {shown!r} names no {row['engine']} version, so the version is unknown "
                    f"(pass --engine-version, or use a versioned tag)")
        entry: tuple[str, ...] = ()
        for option in row.get("entrypoint") or []:
            if not option["versions"] or version is None or _in(version, option["versions"]):
                entry = tuple(option["words"])
                break
        return ImageFacts(row["engine"], entry, version, note, row["source"])
    return None


def _in(version: str, spec: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    return Version(version) in SpecifierSet(spec)


def split_image(image: str) -> tuple[str, str | None]:
    """("ghcr.io/ggml-org/llama.cpp", "server-cuda") from an image reference."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = name.rsplit(":", 1)
        return repo, tag
    return name, None


def is_container_run(argv: Sequence[str]) -> bool:
    if not argv or PurePosixPath(argv[0]).name not in RUNTIMES:
        return False
    rest = list(argv[1:])
    if rest[:2] == ["container", "run"]:
        return True
    return rest[:1] == ["run"]


def split_container_run(argv: Sequence[str], is_engine: Callable[[Sequence[str]], bool]):
    """(engine argv, Container) for `docker|podman run ... IMAGE [ARGS]` running an engine,
    else None."""
    argv = list(argv)
    runtime = PurePosixPath(argv[0]).name
    k = 3 if argv[1] == "container" else 2
    opts: list[tuple[str, str | None]] = []
    while k < len(argv) and argv[k].startswith("-") and argv[k] != "-":
        word = argv[k]
        if word == "--":
            k += 1
            break
        name, value, used = _option(word, argv[k + 1] if k + 1 < len(argv) else None)
        opts.append((name, value))
        k += used
    if k >= len(argv):
        return None
    image, rest = argv[k], argv[k + 1 :]
    wrapper = tuple(argv[: k + 1])
    return engine_in_image(runtime, image, rest, opts, wrapper, is_engine)


def _option(word: str, following: str | None) -> tuple[str, str | None, int]:
    """(name, value, words used) of one docker run option."""
    if word.startswith("--"):
        if "=" in word:
            name, value = word.split("=", 1)
            return name, value, 1
        if word in _BOOL_LONG:
            return word, None, 1
        return word, following, 2
    letters = word[1:]
    if all(c in _BOOL_SHORT for c in letters):
        return word, None, 1
    if len(letters) > 1 and letters[0] not in _BOOL_SHORT:  # -eKEY=VAL, -p8000:8000
        return word[:2], letters[1:], 1
    return word, following, 2


def engine_in_image(runtime, image, rest, opts, wrapper, is_engine, *, entrypoint=None, source=None):
    """The engine argv a container runs and the Container around it, else None."""
    facts = image_facts(image)
    notes: list[str] = []
    inner_shell: tuple[str, ...] = ()
    inner_context = None
    implied = 0
    entry = entrypoint
    if entry is None:
        for name, value in opts:
            if name == "--entrypoint" and value is not None:
                entry = [value]
    if entry:  # an entrypoint written out replaces the image's
        argv = [*entry, *rest]
        implied = len(entry)
    elif rest and is_engine(rest):
        argv = list(rest)
    elif facts is not None and facts.entrypoint and not (rest and PurePosixPath(rest[0]).name in ("bash", "sh")):
        argv = [*facts.entrypoint, *rest]
        implied = len(facts.entrypoint)
    else:
        argv = list(rest)
    if argv and PurePosixPath(argv[0]).name in ("bash", "sh") and len(argv) >= 3 and argv[1] in ("-c", "-lc"):
        from servepilot.engines.shell import split_shell_line

        try:
            inner = split_shell_line(argv[2], is_engine)
        except Exception:  # noqa: BLE001 - not an engine script: not ours
            return None
        inner_shell, inner_context = tuple(argv[:2]), inner.context
        implied = 0
        argv = list(inner.argv)
    if not argv or not is_engine(argv):
        return None
    container = _describe(runtime, image, opts, facts, notes)
    from dataclasses import replace

    return argv, replace(container, wrapper=tuple(wrapper), implied=implied, inner_shell=inner_shell,
                         inner_context=inner_context, source=source)


def _describe(runtime: str, image: str, opts, facts: ImageFacts | None, notes: list[str]) -> Container:
    env: dict[str, str] = {}
    mounts: list[tuple[str, str]] = []
    ports: list[tuple[str | None, str]] = []
    gpus = visible = None
    count = None
    device_ids: list[str | None] = []  # one entry per --device naming GPUs; they add up
    ipc_host = False
    shm: int | None = DOCKER_DEFAULT_SHM
    shm_given = False
    for name, value in opts:
        value = value or ""
        if name in ("-e", "--env"):
            key, sep, val = value.partition("=")
            env[key] = val if sep else "$" + key  # `-e KEY` passes the host's value through
        elif name in ("-v", "--volume"):
            parts = value.split(":")
            if len(parts) >= 2:
                mounts.append((parts[0], parts[1]))
        elif name == "--mount":
            fields = dict(p.split("=", 1) for p in value.split(",") if "=" in p)
            src = fields.get("source") or fields.get("src")
            dst = fields.get("target") or fields.get("destination") or fields.get("dst")
            if src and dst:
                mounts.append((src, dst))
        elif name in ("-p", "--publish"):
            ports.append(_port(value))
        elif name == "--ipc":
            ipc_host = value == "host"
        elif name == "--shm-size":
            shm_given = True
            shm = parse_size(value)
            if shm is None:  # Docker refuses it too; None would read as --ipc=host
                from servepilot.errors import BadInput

                raise BadInput(f"--shm-size {value!r}: not a size (examples: 16g, 512m, 1073741824)")
        elif name == "--gpus":
            gpus = value.strip("'\"")
            visible, count = gpu_selection(value)
        elif name == "--device" and ("nvidia.com/gpu" in value or value.startswith("/dev/nvidia")):
            gpus = value if gpus is None else f"{gpus},{value}"
            device_ids.append(gpu_selection(value)[0])  # None: all of them
        elif name == "--env-file":
            notes.append(f"--env-file {value}: its variables are not read; pass them with -e to have them checked")
        elif name == "--network" and value == "host":
            notes.append("--network host: the engine's own port is the host port")
    if device_ids and not any(n == "--gpus" for n, _ in opts):
        if None in device_ids:
            visible = count = None
        else:
            visible = ",".join(device_ids)
            count = len(visible.split(","))
    if ipc_host:
        shm = None
    elif not shm_given:
        notes.append(f"{runtime} run without --ipc=host or --shm-size: /dev/shm in the container is 64 MiB")
    if gpus is None and env.get("NVIDIA_VISIBLE_DEVICES") is None:
        notes.append(f"{runtime} run without --gpus or --device: the container sees no GPU")
    if facts is not None and facts.note:
        notes.append(facts.note)
    detached = any(n in ("-d", "--detach") or (n.startswith("-") and not n.startswith("--") and "d" in n
                                                and all(ch in _BOOL_SHORT for ch in n[1:]))
                   for n, _ in opts)
    return Container(detached=detached, runtime=runtime, image=image, engine=facts.engine if facts else None,
                     version=facts.version if facts else None, gpus=gpus, visible_devices=visible,
                     gpu_count=count, mounts=tuple(mounts), ports=tuple(ports), ipc_host=ipc_host,
                     shm_bytes=shm, env=env, notes=tuple(notes))


def gpu_selection(text: str) -> tuple[str | None, int | None]:
    """(visible host indices or None for all, count or None) of a --gpus / --device value.

    `--gpus` is read as Docker reads it (opts/gpus.go@docker/cli): comma-separated fields,
    a bare field is the count ("all" or a number), `count=`, `device=` (ids; the whole field
    quoted when it lists several), and `driver=`, `capabilities=`, `options=` which select
    nothing; with neither a count nor devices Docker asks for one GPU. Raises BadInput on a
    value Docker itself refuses.
    """
    t = text.strip().strip("'")
    if t.startswith("/dev/nvidia") and t[len("/dev/nvidia"):].isdigit():
        return t[len("/dev/nvidia"):], 1
    if t.startswith("nvidia.com/gpu="):  # a CDI device name (podman, docker --device)
        t = t.split("=", 1)[1]
        if t == "all":
            return None, None
        return t, len(t.split(","))
    if t == "":
        return None, None
    return _docker_gpu_request(t)


def _docker_gpu_request(text: str) -> tuple[str | None, int | None]:
    import csv

    from servepilot.errors import BadInput

    try:
        fields = next(csv.reader([text]))
    except (csv.Error, StopIteration):
        raise BadInput(f"--gpus {text!r}: not a comma-separated GPU request") from None
    count: int | None = 1
    devices: str | None = None
    counted = False
    for field_text in fields:
        key, has_value, value = field_text.partition("=")
        if not has_value:
            key, value = "count", key
        if key == "count":
            counted = True
            if value == "all":
                count = None
            elif value.isdigit():
                count = int(value)
            else:
                raise BadInput(f"--gpus {text!r}: count {value!r} is neither 'all' nor a number")
        elif key == "device":
            devices = value
        elif key not in ("driver", "capabilities", "options"):
            raise BadInput(f"--gpus {text!r}: Docker knows no GPU request key {key!r}")
    if devices is not None:
        return devices, len(devices.split(","))
    if counted and count is None:
        return None, None
    return ",".join(str(i) for i in range(count)), count


def _port(text: str) -> tuple[str | None, str]:
    parts = text.split("/")[0].split(":")
    if len(parts) == 1:
        return None, parts[0]
    return parts[-2], parts[-1]


_SIZE_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
# Kubernetes quantity suffixes, case-sensitive: "m" is milli, "M" mega; "Ki".."Ei" binary
_K8S_DECIMAL = {"m": 10**-3, "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_K8S_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_size(text: str, kubernetes: bool = False) -> int | None:
    """Bytes of a size, None when it is not one.

    Docker sizes (16g, 512m, 1073741824; binary units, any case, an optional b) and
    Kubernetes quantities (16Gi binary, 16G decimal, 500m milli:
    https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/).
    """
    if kubernetes:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)([kMGTPE]i|[mkMGTPE]?)\s*", str(text))
        if not m:
            return None
        factor = _K8S_BINARY.get(m.group(2)) or _K8S_DECIMAL[m.group(2)]
        return int(float(m.group(1)) * factor)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgtpKMGTP]?)(i?)[bB]?\s*", str(text))
    if not m:
        return None
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
