"""EngineLaunch: an engine command line as the operator typed it, understood."""

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

    def get(self, name: str, default=None):
        return self.options.get(name, default)

    @property
    def tensor_parallel_size(self) -> int:
        return int(self.options.get("tensor_parallel_size") or 1)

    @property
    def pipeline_parallel_size(self) -> int:
        return int(self.options.get("pipeline_parallel_size") or 1)

    @property
    def data_parallel_size(self) -> int:
        return int(self.options.get("data_parallel_size") or 1)

    @property
    def port(self) -> int | None:
        p = self.options.get("port")
        return int(p) if p is not None else None
