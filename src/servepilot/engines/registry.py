"""The engines servepilot knows: one record per engine, the one place that dispatches on it.

A record names the engine, its aliases, the subpackage that holds its command-line module
(`cmdline`: detection and parsing), its resolver (`resolve`), its log rows (`logs`: load
phases, fatal lines, start-up markers) and its knowledge data (`knowledge/`), and the
engine's own option names for the parallel sizes, port and model. Adding an engine is
adding one record, its subpackage and its data (and a planner in planning/, which sits above
this layer and looks its planner up by the record's name).

This module imports nothing heavy: the per-engine modules load on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from servepilot.errors import BadInput


@dataclass(frozen=True)
class EngineRecord:
    name: str  # the engine's name in JSON, signatures and history: "vllm", "llama.cpp"
    label: str  # how prose names it: "vLLM"
    package: str  # subpackage under servepilot.engines: "vllm", "llamacpp"
    aliases: tuple[str, ...] = ()  # other spellings accepted from the operator
    # the engine's own option (dest) names; an empty tuple: the engine has no such option
    tp_options: tuple[str, ...] = ()
    pp_options: tuple[str, ...] = ()
    dp_options: tuple[str, ...] = ()
    ep_size_options: tuple[str, ...] = ()  # an expert-parallel size (SGLang --ep-size)
    ep_switch: str | None = None  # an expert-parallel on/off flag (vLLM --enable-expert-parallel)
    port_option: str = "port"
    model_option: str = "model"
    # options `servepilot deployment` shows first (when the command or its defaults set them)
    key_options: tuple[str, ...] = ()
    # flag tables extracted from the engine's own argparse release by release (flaggen): a flag
    # missing from the table for a sampled release is one the engine refuses
    authoritative_flag_table: bool = False

    def module(self, part: str) -> ModuleType:
        """servepilot.engines.<package>.<part> (cmdline, resolve, release, logs), imported on
        first use."""
        return _load_part(self.package, part)

    @property
    def cmdline(self) -> ModuleType:
        return self.module("cmdline")

    @property
    def resolver(self) -> ModuleType:
        return self.module("resolve")

    @property
    def logs(self) -> ModuleType:
        return self.module("logs")

    def resolve(self, dep):
        """The engine's Resolution of `dep`, with its ReleaseFacts (the rows rules read)."""
        import dataclasses

        res = self.resolver.resolve(dep)
        return dataclasses.replace(res, release=self.module("release").release_facts(dep, res))

    @property
    def knowledge_package(self) -> str:
        return f"servepilot.engines.{self.package}.knowledge"


# Each engine's parts, imported where they are first needed (a triage reads only `logs`, a
# parse only `cmdline`) and with plain import statements, so every edge is visible.
def _load_part(package: str, part: str) -> ModuleType:
    match package, part:
        case "vllm", "cmdline":
            from servepilot.engines.vllm import cmdline as mod
        case "vllm", "resolve":
            from servepilot.engines.vllm import resolve as mod
        case "vllm", "release":
            from servepilot.engines.vllm import release as mod
        case "vllm", "logs":
            from servepilot.engines.vllm import logs as mod
        case "sglang", "cmdline":
            from servepilot.engines.sglang import cmdline as mod
        case "sglang", "resolve":
            from servepilot.engines.sglang import resolve as mod
        case "sglang", "release":
            from servepilot.engines.sglang import release as mod
        case "sglang", "logs":
            from servepilot.engines.sglang import logs as mod
        case "llamacpp", "cmdline":
            from servepilot.engines.llamacpp import cmdline as mod
        case "llamacpp", "resolve":
            from servepilot.engines.llamacpp import resolve as mod
        case "llamacpp", "release":
            from servepilot.engines.llamacpp import release as mod
        case "llamacpp", "logs":
            from servepilot.engines.llamacpp import logs as mod
        case _:
            raise KeyError(f"engine package {package!r} has no part {part!r}")
    return mod


# Option names: vLLM EngineArgs fields (vllm/engine/arg_utils.py@v0.16.0), SGLang ServerArgs
# fields (sglang/srt/server_args.py@v0.5.2: tp_size / pp_size / dp_size / ep_size; `--tp`
# is an alias of `--tp-size`), llama.cpp long option names (no tensor parallelism: layers
# are split with --split-mode / --tensor-split, one process).
ENGINES: tuple[EngineRecord, ...] = (
    EngineRecord(
        name="vllm", label="vLLM", package="vllm",
        tp_options=("tensor_parallel_size",), pp_options=("pipeline_parallel_size",),
        dp_options=("data_parallel_size",), ep_switch="enable_expert_parallel",
        model_option="model", authoritative_flag_table=True,
        key_options=("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                     "enable_expert_parallel", "kv_cache_dtype", "max_model_len", "gpu_memory_utilization",
                     "kv_cache_memory_bytes", "attention_backend", "quantization", "dtype", "trust_remote_code",
                     "host", "port"),
    ),
    EngineRecord(
        name="sglang", label="SGLang", package="sglang",
        tp_options=("tp_size",), pp_options=("pp_size",), dp_options=("dp_size",),
        ep_size_options=("ep_size",), model_option="model_path", authoritative_flag_table=True,
        key_options=("tp_size", "pp_size", "dp_size", "ep_size", "kv_cache_dtype", "context_length",
                     "mem_fraction_static", "attention_backend", "quantization", "trust_remote_code", "host", "port"),
    ),
    EngineRecord(
        name="llama.cpp", label="llama.cpp", package="llamacpp",
        aliases=("llamacpp", "llama-cpp"),
        model_option="model",
        key_options=("ctx_size", "n_ctx", "n_gpu_layers", "cache_type_k", "cache_type_v", "flash_attn",
                     "parallel", "host", "port"),
    ),
)

ENGINE_NAMES: tuple[str, ...] = tuple(e.name for e in ENGINES)
_BY_SPELLING = {s: e for e in ENGINES for s in (e.name, e.package, *e.aliases)}


def find_engine(name: str | None) -> EngineRecord | None:
    """The record for an engine name or alias (any case), or None."""
    if not name:
        return None
    return _BY_SPELLING.get(name.lower())


def engine_record(name: str | None) -> EngineRecord:
    """The record for an engine name or alias; BadInput naming the known engines otherwise."""
    found = find_engine(name)
    if found is None:
        raise BadInput(f"unknown engine {name!r}; expected one of {', '.join(ENGINE_NAMES)}")
    return found


def canonical_name(name: str) -> str:
    """"llamacpp" / "llama-cpp" -> "llama.cpp"; BadInput for an engine servepilot does not know."""
    return engine_record(name).name
