"""Deployment = ModelSpec + Cluster + EngineLaunch: the one object that flows through."""

from __future__ import annotations

from dataclasses import dataclass, field

from servepilot.checkpoint.spec import ModelSpec
from servepilot.engines.command import EngineLaunch
from servepilot.hardware.cluster import Cluster
from servepilot.hardware.host import HostFacts


@dataclass(frozen=True)
class Deployment:
    launch: EngineLaunch
    cluster: Cluster
    spec: ModelSpec | None  # None when the model path cannot be read here (ssh host, missing)
    notes: tuple[str, ...] = ()  # what could not be known, in words
    extra: dict = field(default_factory=dict)
    # This machine's facts for the command (its port), probed once; None when the command
    # runs elsewhere (ssh) or probing was skipped. Rules read it, never probe themselves.
    host: HostFacts | None = None

    @property
    def engine(self) -> str:
        return self.launch.engine

    @property
    def engine_version(self) -> str | None:
        return self.launch.engine_version

    JSON_SCHEMA = "servepilot.deployment/1"

    def to_json(self) -> dict:
        """The JSON object of docs/json/deployment.md (the "schema" key is added by the CLI)."""
        from servepilot.engines.cmdline import render_command
        from servepilot.jsonable import to_jsonable

        launch = self.launch
        cluster = to_jsonable(self.cluster)
        cluster["count"] = self.cluster.count
        return to_jsonable({
            "engine": launch.engine,
            "engine_version": launch.engine_version,
            "engine_version_source": self.extra.get("engine_version_source"),
            "program": launch.program,
            "model": launch.model,
            "options": launch.options,
            "explicit": sorted(launch.explicit),
            "unknown_flags": list(launch.unknown_flags),
            "config_file": launch.config_file,
            "shell": launch.shell,
            "command": render_command(launch),
            "spec": self.spec,
            "cluster": cluster,
            "notes": list(self.notes),
            "container": self.extra.get("container"),
            "remote": _remote_payload(self.spec),
        })


def _remote_payload(spec) -> dict | None:
    """Where a Hub model's headers came from, when it was read remotely (not cached)."""
    if spec is None:
        return None
    from servepilot.checkpoint.remote import view_of

    view = view_of(spec.path)
    return view.to_json() if view is not None else None


def build_deployment(
    command: list[str] | str | None = None,
    gpu: str | None = None,
    engine_version: str | None = None,
    command_file: str | None = None,
    probe: bool = True,
    cwd: str | None = None,
) -> Deployment:
    """Parse the command, pick the engine version, inspect the model, and find the GPUs.

    The engine version is --engine-version, else the package installed here (not for a command
    that runs over ssh), else None with a note. GPUs come from --gpu, else from probing this
    machine (not for ssh; honouring the command's CUDA_VISIBLE_DEVICES). Raises
    CommandLineError for a command that is not an engine launch, BadInput for a local model
    path that does not exist, UnknownGpu for a --gpu that matches nothing.
    """
    from servepilot.engines.cmdline import detect_engine, parse_argv, split_command
    from servepilot.engines.versions import installed_version
    from servepilot.hardware.catalog import cluster_from_flag

    split = split_command(command, command_file)
    cd_notes: list[str] = []
    if cwd is None:
        cwd, cd_notes = working_directory(split.context.prefix_commands)
    flag_cluster = cluster_from_flag(gpu) if gpu else None  # a bad --gpu fails before any file is read
    found = detect_engine(split.argv)
    if found is None:  # split_command only returns engine commands; kept for safety
        from servepilot.errors import CommandLineError

        raise CommandLineError(f"unknown engine program {split.argv[0]!r}")
    module, program, _ = found
    notes: list[str] = list(split.notes) + cd_notes
    ssh_host = split.context.ssh_host

    container = split.context.container  # docker run / compose / Kubernetes (engines/containers.py)
    version_source = None
    # The engine in an image is the image's, never the package installed on this host.
    # Package metadata is read only when it decides the version (importlib.metadata costs ~40 ms).
    installed = (None if ssh_host or engine_version or container is not None
                 else installed_version(module.ENGINE, program))
    if container is not None:
        notes += list(container.notes)
    if engine_version:
        from servepilot.engines.knowledge import release_version

        if module.ENGINE == "llama.cpp" and "llama_cpp.server" not in program:
            # llama.cpp's releases are tagged bNNNN; the build number is the version
            engine_version = engine_version.strip().removeprefix("b")
        release_version(engine_version)  # BadInput for a version that is not one
        version_source = "flag"
    elif container is not None and container.version:
        engine_version, version_source = container.version, "image"
    elif container is not None:
        pass  # the image's note says the version is unknown
    elif installed:
        engine_version, version_source = installed, "installed"
    elif ssh_host:
        notes.append(f"{module.ENGINE} version on {ssh_host} unknown: pass --engine-version")
    else:
        notes.append(f"{module.ENGINE} is not installed here and no --engine-version was given: flags are checked "
                     "against every known version")

    launch = parse_argv(split.argv, split.context, engine_version=engine_version, cwd=cwd)
    notes += launch.notes

    model = launch.model
    if container is not None:
        model, container_notes = _host_model(container, model)
        notes += container_notes
    if model is IN_CONTAINER:
        spec, spec_notes = None, []
    else:
        spec, spec_notes = _inspect_model(model, ssh_host, cwd, revision=launch.options.get("revision"))
    notes += spec_notes

    container_visible = container.visible_devices if container is not None else None
    if flag_cluster is not None:
        cluster = flag_cluster
        visible = container_visible or launch.shell.env.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            cluster = _restrict_flag_cluster(cluster, visible)
    elif ssh_host:
        cluster = Cluster(
            source="none",
            remote_host=ssh_host,
            notes=(f"the command runs on {ssh_host} over ssh; its GPUs are not probed from here: pass --gpu NAME[xN]",),
        )
    elif probe:
        from servepilot.hardware.probe import probe_cluster

        cluster = probe_cluster(
            cuda_visible_devices=container_visible or launch.shell.env.get("CUDA_VISIBLE_DEVICES"),
        )
    else:
        cluster = Cluster(source="none", notes=("GPU probe skipped and no --gpu given",))
    host_port = container.host_port if container is not None else None
    host_port = int(host_port) if host_port and str(host_port).isdigit() else None
    host = _host_facts(launch, host_port) if probe and not ssh_host else None
    if host is not None and cluster.source == "probe" and (host_port or launch.port) is not None:
        # `deployment --json` has always shown the probed port under the cluster's extra.
        from dataclasses import replace

        cluster = replace(cluster, extra={**cluster.extra, "port": host.port, "port_host": host.port_host,
                                          "port_free": host.port_free},
                          notes=cluster.notes + host.notes)

    if container is not None and container.shm_bytes is not None:
        from dataclasses import replace

        cluster = replace(cluster, shm_bytes=container.shm_bytes)  # the container's /dev/shm, not the host's
    extra = {"engine_version_source": version_source, "installed_engine_version": installed, "cwd": cwd,
             "container": container_facts(container)}
    return Deployment(launch=launch, cluster=cluster, spec=spec, notes=tuple(dict.fromkeys(notes)),
                      extra=extra, host=host)


def _host_facts(launch: EngineLaunch, host_port: int | None) -> HostFacts:
    """The port facts of this machine for the command: the container's published host port,
    else its --port, else the engine's default."""
    from servepilot.engines.ports import default_port
    from servepilot.hardware.host import probe_port

    port = host_port or (launch.port if launch.port is not None else default_port(launch.engine, launch.program))
    return probe_port(port, None if host_port else launch.options.get("host"))


IN_CONTAINER = "<inside the container>"  # a model path no mount maps to the host


def container_facts(container) -> dict | None:
    """The container around the engine, as plain data (deployment --json `container`)."""
    if container is None:
        return None
    return {"runtime": container.runtime, "image": container.image, "engine": container.engine,
            "version": container.version, "gpus": container.gpus, "visible_devices": container.visible_devices,
            "gpu_count": container.gpu_count, "mounts": [list(m) for m in container.mounts],
            "ports": [list(p) for p in container.ports], "ipc_host": container.ipc_host,
            "shm_bytes": container.shm_bytes, "env": dict(container.env), "source": container.source,
            "command": list(container.wrapper)}


def _host_model(container, model: str | None) -> tuple[str | None, list[str]]:
    """The host path of a model path inside the container (through its mounts)."""
    from servepilot.checkpoint.hub import looks_like_model_id, split_quant_tag

    if model is None or not model.startswith("/"):
        if model is not None and not looks_like_model_id(model) and not split_quant_tag(model)[1]:
            return model, [f"model {model} is a relative path inside the container: read from here as given"]
        return model, []
    host = container.host_path(model)
    if host is None:
        return IN_CONTAINER, [f"model {model} is inside the container and no host directory is mounted "
                                     "there: not inspected"]
    return host, [f"model {model} in the container is {host} on the host (mount)"]


def working_directory(prefix_commands: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """Where the command's own `cd DIR` prefixes (`cd /models && vllm serve ./kimi`, or a
    script that cds first) leave it, from this process's directory; (None, []) without a cd.

    A cd whose target is a shell variable or `-` is unknowable: (None, [note]). A target
    that does not exist is BadInput: the engine could not start there.
    """
    import os
    import shlex

    from servepilot.errors import BadInput

    here = os.getcwd()
    moved = False
    for text in prefix_commands:
        body = text.strip()
        for sep in ("&&", ";", "||"):
            body = body.removesuffix(sep).strip()
        try:
            words = shlex.split(body)
        except ValueError:
            continue
        if not words or words[0] != "cd":
            continue
        target = words[1] if len(words) > 1 else "~"
        if "$" in target or target == "-" or len(words) > 2:
            return None, [f"`{body}`: the directory it changes to is unknown here; relative paths are read from {here}"]
        here = os.path.normpath(os.path.join(here, os.path.expanduser(target)))
        moved = True
        if not os.path.isdir(here):
            raise BadInput("the command's `cd` goes to a directory that does not exist", path=here)
    if not moved:
        return None, []
    return here, [f"the command runs in {here} (its `cd`)"]


def _inspect_model(model: str | None, ssh_host: str | None, cwd: str | None, revision=None):
    """(ModelSpec or None, notes) for the command's model path or Hugging Face id."""
    import os
    from pathlib import Path

    from servepilot.errors import BadInput

    if model is None:
        return None, ["the command names no model"]
    from servepilot.engines.flagtable import has_variable

    if has_variable(model):
        return None, [f"model {model!r} is a shell variable the command does not set; not inspected"]
    path = Path(os.path.expanduser(model))  # Path.expanduser raises on ~nosuchuser
    if not path.is_absolute() and cwd:
        path = Path(cwd) / path
    from servepilot.checkpoint.hub import looks_like_model_id
    from servepilot.checkpoint.inspect import inspect_path  # lazy: reads headers only when needed

    if path.exists():
        return inspect_path(path), []
    if ssh_host:
        return None, [f"model {model} is on {ssh_host}, not here: not inspected"]
    from servepilot.checkpoint.hub import split_quant_tag

    if looks_like_model_id(model) or split_quant_tag(model)[1]:
        from servepilot.checkpoint.remote import view_of

        try:
            spec = inspect_path(model, revision=revision if isinstance(revision, str) else None)
        except BadInput as exc:
            return None, [f"model {model}: {exc.one_line()}"]
        view = view_of(spec.path)
        if view is None:
            return spec, []
        return spec, [f"model {model} read from {view.endpoint} at commit {view.commit[:12]}: config files and "
                      f"weight headers only ({view.requests} requests now; none on a repeat)"]
    raise BadInput("model path does not exist", path=model, hint="give a local checkpoint directory or file, or a "
                                                                 "Hugging Face id")


def _restrict_flag_cluster(cluster: Cluster, visible: str) -> Cluster:
    from dataclasses import replace

    from servepilot.hardware.probe import apply_visible_devices

    gpus, notes = apply_visible_devices(cluster.gpus, (), visible)
    topology = cluster.topology if len(gpus) > 1 else None  # one visible GPU talks to no other
    return replace(cluster, gpus=gpus, topology=topology, notes=cluster.notes + tuple(notes))
