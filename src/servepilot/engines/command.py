"""EngineLaunch: an engine command line as the operator typed it, understood (the parsed
command; runs/launch.py is the supervision of a running one)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ShellContext:
    """What surrounded the engine command in the shell line."""

    env: dict = field(default_factory=dict)  # leading KEY=VAL and `env K=V`
    ssh_host: str | None = None  # `ssh root@host '...'`
    nohup: bool = False
    background: bool = False  # trailing `&`
    stdout_file: str | None = None  # `> file`
    stderr_file: str | None = None  # `2> file` or `2>&1` (same as stdout)
    append: bool = False  # `>>`
    tail: tuple[str, ...] = ()  # `; echo ...` and other commands after the engine's
    prefix_commands: tuple[str, ...] = ()  # `pkill ...; sleep 3;` before it
    ssh_options: tuple[str, ...] = ()  # `ssh -p 2222 -i key HOST ...`: the options before HOST
    wrappers: tuple[str, ...] = ()  # `sudo -E`, `exec`, `time` words run before the engine (not env/nohup)
    shell_wrapper: tuple[str, ...] = ()  # `bash -lc '...'`: the shell and its options, around the line
    # `docker run ... IMAGE`, a compose service or a Kubernetes container around the engine
    # (engines/containers.py Container); None when the engine runs directly
    container: object = None


@dataclass(frozen=True)
class EngineLaunch:
    """A parsed engine command.

    `options` holds normalized values under the engine's own dest names (vLLM's
    EngineArgs field names: tensor_parallel_size, kv_cache_dtype, max_model_len,
    gpu_memory_utilization, port, host, trust_remote_code, attention_backend, quantization,
    enable_expert_parallel, ...; SGLang's ServerArgs names; llama.cpp's long option names
    without dashes). Flags that the engine's knowledge does not list go to `unknown_flags`
    and are kept for rendering.
    """

    engine: str  # "vllm" | "sglang" | "llama.cpp"
    argv: tuple[str, ...]  # the engine's own argv, program first ("vllm", "serve", ...)
    program: str  # "vllm serve" | "python -m vllm.entrypoints.openai.api_server" | ...
    model: str | None
    options: dict = field(default_factory=dict)
    explicit: frozenset = frozenset()  # option names the operator set (vs defaults)
    unknown_flags: tuple[str, ...] = ()
    shell: ShellContext = field(default_factory=ShellContext)
    config_file: str | None = None  # vLLM --config x.yaml
    engine_version: str | None = None  # from --engine-version or the installed package
    notes: tuple[str, ...] = ()  # what parsing noticed: values the engine rejects, unknown flags
    # arguments the engine's own parser refuses before it loads anything (argparse exits 2):
    # a value that does not convert, a missing value, a stray positional, a flag that this
    # release does not have. A subset of `notes`, kept apart so `check` can fail on them.
    rejected: tuple[str, ...] = ()

    @property
    def run_argv(self) -> tuple[str, ...]:
        """What to execute: the engine argv, or the container wrapper around it as written."""
        if self.shell.container is not None:
            return tuple(self.shell.container.run_argv(self.argv))
        return self.argv

    def get(self, name: str, default=None):
        return self.options.get(name, default)

    @property
    def record(self):
        """This engine's registry record (its option names, modules)."""
        from servepilot.engines.registry import engine_record

        return engine_record(self.engine)

    @property
    def tensor_parallel_size(self) -> int:
        """TP under the engine's own option name (vLLM --tensor-parallel-size, SGLang --tp-size)."""
        return self._whole(self.record.tp_options)

    @property
    def pipeline_parallel_size(self) -> int:
        return self._whole(self.record.pp_options)

    @property
    def data_parallel_size(self) -> int:
        return self._whole(self.record.dp_options)

    @property
    def expert_parallel_size(self) -> int:
        """EP ranks: SGLang's --ep-size; vLLM's --enable-expert-parallel spreads the experts over
        TP x DP ranks (vllm/config/parallel.py@v0.16.0); 1 when expert parallelism is off."""
        record = self.record
        if record.ep_size_options:
            return self._whole(record.ep_size_options)
        if record.ep_switch and _truthy(self.options.get(record.ep_switch)):
            return self.tensor_parallel_size * self.data_parallel_size
        return 1

    @property
    def expert_parallel(self) -> bool:
        """Whether the experts are spread over ranks (vLLM's switch, SGLang's ep_size > 1)."""
        record = self.record
        if record.ep_size_options:
            return self._whole(record.ep_size_options) > 1
        return bool(record.ep_switch and _truthy(self.options.get(record.ep_switch)))

    @property
    def port(self) -> int | None:
        """The port as a number; None when unset or not a number (the parse already noted the
        value the engine rejects, and a port probe has nothing to probe)."""
        p = self.options.get("port")
        try:
            return int(p) if p is not None else None
        except (TypeError, ValueError):
            return None

    def _whole(self, dests: tuple[str, ...]) -> int:
        """A parallel size as a number (1 when unset or when the engine has no such option);
        CommandLineError for `-tp abc` or an unset `${TP}`, which the engine's argparse
        rejects before it starts."""
        dest = next((d for d in dests if self.options.get(d) not in (None, "")), None)
        if dest is None:
            return 1
        value = self.options[dest]
        try:
            return int(value or 1)
        except (TypeError, ValueError):
            from servepilot.errors import CommandLineError

            raise CommandLineError(f"{dest} = {value!r} is not a whole number",
                                   hint=f"{self.engine} needs a number here") from None


def _truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)
