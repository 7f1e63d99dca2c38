"""What check could not establish: each unknown fact a rule needs, and what would settle it.

A PASS means every rule had what it needed. When a fact is missing (the model's geometry,
its layer kinds, its quantization, whether the engine version serves the architecture, the
memory plan), the verdict is `unknown` (exit 4) unless an error already decides the launch.
"""

from __future__ import annotations

from dataclasses import dataclass

# config.json keys that announce layers other than plain attention + MLP: in a family
# servepilot does not know, their presence means the layer kinds were not understood.
_UNUSUAL_KEYS = (
    "mamba",
    "ssm",
    "linear_",
    "block_configs",
    "layer_types",
    "hybrid",
    "attn_type_list",
    "layers_block_type",
    "full_attention_interval",
    "conv_L_cache",
)


@dataclass(frozen=True)
class Unknown:
    fact: str  # what could not be established
    why: str  # what was missing or unreadable
    settle: str  # what would settle it

    def line(self) -> str:
        return f"{self.fact}: {self.why} (settle: {self.settle})"


def unknowns_of(dep, ctx) -> list[Unknown]:
    spec = dep.spec
    out: list[Unknown] = []
    if spec is None:
        unread = _unread_hub_model(dep)
        if unread:
            out.append(Unknown("model", unread, "access to the model on the Hub (HF_TOKEN, network), or "
                                                "`hf download` it and check again"))
        return out
    if spec.format == "gguf":
        if dep.engine == "llama.cpp":
            from servepilot.checks.rules.llamacpp_build import llamacpp_build_unknowns

            out.extend(llamacpp_build_unknowns(dep))
        else:  # vLLM / SGLang plan a GGUF's memory like any checkpoint: no plan, no verdict
            out.extend(_memory_unknowns(ctx))
        return out
    config = spec.config or {}
    if spec.format == "hf":
        if not config.get("model_type") and not config.get("architectures"):
            out.append(
                Unknown(
                    "architecture",
                    "config.json has neither model_type nor architectures",
                    "a config.json that names the model class (architectures) and model_type",
                )
            )
        if spec.attention is None and not spec.layers:
            why = next(
                (u for u in spec.unknown if u.startswith(("attention:", "head_dim:"))),
                "no layer geometry",
            )
            out.append(
                Unknown(
                    "model geometry",
                    why,
                    "num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size "
                    "and head_dim in config.json",
                )
            )
        for u in spec.unknown:
            if any(w in u for w in ("layer kind", "block kind", "Mamba layers", "kv_lora_rank")):
                out.append(
                    Unknown("layer kinds", u, "a model family servepilot reads layer by layer")
                )
            elif _sizes_estimated(spec) and (
                "per-layer list" in u or "experts per token unknown" in u
            ):
                # the weights are counted from the geometry, and part of it was not read: the
                # count (and every memory figure on it) would rest on a silent default
                out.append(
                    Unknown(
                        "model geometry",
                        u,
                        "the checkpoint's safetensors shards (or their index), whose sizes "
                        "do not depend on reading this key",
                    )
                )
            elif u.startswith(("weights:", "vocab_size:", "hidden_size:")) and spec.weights is None:
                # no shard headers and the architecture cannot be counted: the weight and
                # memory figures the rules compare would rest on a partial count
                out.append(
                    Unknown(
                        "weights",
                        u,
                        "the checkpoint's safetensors shards (or their index), or "
                        "a config.json with hidden_size and vocab_size",
                    )
                )
        if spec.family is None and spec.attention is not None and not _layers_understood(spec):
            keys = sorted(k for k in _text(spec) if any(w in k for w in _UNUSUAL_KEYS))
            out.append(
                Unknown(
                    "layer kinds",
                    f"model_type {spec.text_model_type or spec.model_type!r} is not a "
                    f"family servepilot knows and its config has {', '.join(keys[:4])}",
                    "a servepilot release that reads this family's layers",
                )
            )
    q = spec.quant
    if q is not None and (q.method == "unknown" or not q.method):
        out.append(
            Unknown(
                "quantization",
                f"{q.declared_in} declares quantization without a method servepilot knows",
                "a quant_method (or modelopt quant_algo) servepilot reads",
            )
        )
    elif q is not None and dep.engine == "vllm":
        resolved = _resolved_quant(ctx)
        if resolved is None:
            words = f"{q.method} {q.quant_algo}" if q.quant_algo else q.method
            out.append(
                Unknown(
                    "quantization",
                    f"{q.declared_in} declares {words}, which servepilot does not resolve to a "
                    "vLLM quantization method (kernels, KV cache dtype and weight sizes follow it)",
                    "a servepilot release that reads this scheme for the engine version",
                )
            )
    w = spec.weights
    if w is not None and w.source == "safetensors" and w.total_bytes is None and w.damaged:
        out.append(
            Unknown("weights", "no shard header could be read", "readable safetensors shards")
        )
    arch = _arch_unknown(dep, ctx)
    if arch is not None:
        out.append(arch)
    attention = _sglang_attention_unknown(dep, ctx) or _vllm_attention_unknown(dep, ctx)
    if attention is not None:
        out.append(attention)
    if dep.engine == "sglang":
        from servepilot.checks.rules.sglang_custom_allreduce import peer_access_unknowns
        from servepilot.checks.rules.sglang_quant import quant_unknowns

        out.extend(quant_unknowns(dep, ctx))
        out.extend(peer_access_unknowns(dep, ctx))
    out.extend(_memory_unknowns(ctx))
    return out


def _memory_unknowns(ctx) -> list[Unknown]:
    return [
        Unknown(
            "memory",
            note.removeprefix("memory plan not available: "),
            "the model geometry and weights the planner needs",
        )
        for note in ctx.notes
        if note.startswith("memory plan not available")
    ]


def _resolved_quant(ctx):
    try:
        return (ctx.resolution.summary() or {}).get("quantization")
    except Exception:  # noqa: BLE001 - a resolution that cannot summarise settles nothing
        return None


def _sizes_estimated(spec) -> bool:
    """True when the weights are counted from config.json rather than read from headers."""
    return spec.weights is None or spec.weights.source == "estimate"


def _text(spec) -> dict:
    return spec.text_config or spec.config or {}


def _layers_understood(spec) -> bool:
    """False when an unknown family's config announces layer kinds the reader left uniform."""
    text = _text(spec)
    if not any(any(w in k for w in _UNUSUAL_KEYS) for k in text):
        return True
    kinds = {ly.mixer for ly in spec.layers}
    return len(kinds) > 1 or kinds - {"full", "sliding"} != set()


def _arch_unknown(dep, ctx) -> Unknown | None:
    """Whether the vLLM release serves the architecture, when servepilot has not read it."""
    spec = dep.spec
    if dep.engine == "sglang" and spec.architectures:
        return _sglang_arch_unknown(dep, ctx)
    if dep.engine != "vllm" or not spec.architectures:
        return None
    version = dep.engine_version or getattr(ctx.resolution, "engine_version", None)
    release = getattr(ctx.resolution, "release", None)
    status_since = getattr(release, "architecture", None) if release is not None else None
    if version is None or not status_since:
        return None
    status, _ = status_since
    if status != "unknown":
        return None
    custom = spec.custom_code is not None and bool(spec.custom_code.auto_map)
    if custom and dep.launch.get("trust_remote_code"):
        return None  # the checkpoint's own code runs: the registry does not decide
    return Unknown(
        "architecture support",
        f"whether vLLM {version} serves {spec.architectures[0]} "
        "(its model registry was not read by servepilot)",
        "--engine-version of a release servepilot "
        "has read, or the checkpoint's own code with --trust-remote-code",
    )


def _sglang_arch_unknown(dep, ctx) -> Unknown | None:
    """Whether the SGLang release implements the architecture, when servepilot has not read it."""
    from servepilot.engines.sglang.release import architecture_status

    spec = dep.spec
    version = dep.engine_version or getattr(ctx.resolution, "engine_version", None)
    if version is None or spec.format == "gguf":
        return None
    states = [architecture_status(a, version)[0] for a in spec.architectures]
    if "native" in states or "unknown" not in states:
        return None
    return Unknown(
        "architecture support",
        f"whether SGLang {version} implements {spec.architectures[0]} (its model registry was not "
        "read by servepilot)",
        "--engine-version of a SGLang release servepilot has read (0.2.15-0.5.23)",
    )


def _sglang_attention_unknown(dep, ctx) -> Unknown | None:
    """An SGLang release outside the lines whose attention backend selection was read: which
    backend it runs, and which it refuses on this GPU, is not guessed from a neighbour."""
    from servepilot.engines.sglang import attention

    res = ctx.resolution
    version = dep.engine_version or getattr(res, "engine_version", None)
    if dep.engine != "sglang" or dep.cluster.platform != "cuda" or not version:
        return None
    if getattr(res, "gpu_cc", None) is None or attention.modelled(version):
        return None
    span = attention.read_span()
    return Unknown(
        "attention backend",
        f"which attention backend SGLang {version} picks, and which it refuses on compute "
        f"capability {res.gpu_cc[0]}.{res.gpu_cc[1]} (servepilot read SGLang {span})",
        f"--engine-version of a SGLang release servepilot has read ({span})",
    )


def _vllm_attention_unknown(dep, ctx) -> Unknown | None:
    """A vLLM release outside the ones whose CUDA attention selection was read: the backend
    rules of the nearest read release were applied, and a pass on them would be a guess (the
    V0 engine of 0.5-0.9 chooses by other rules, and a later release may refuse more)."""
    from servepilot.engines import knowledge as kb

    res = ctx.resolution
    version = dep.engine_version
    if dep.engine != "vllm" or dep.cluster.platform != "cuda" or not version:
        return None
    if getattr(res, "gpu_cc", None) is None or kb.is_known_version("vllm", version):
        return None
    from servepilot.checks.old_vllm import modelled, old_selection

    if modelled(version):
        # a release before 0.10.0 whose V0/V1 selection was read (knowledge/old_attention.yaml)
        chosen = old_selection(dep, res)
        if chosen.decided:
            return None
        return Unknown(
            "attention backend",
            f"which attention backend vLLM {version} picks on compute capability "
            f"{res.gpu_cc[0]}.{res.gpu_cc[1]}: {chosen.why_undecided}",
            "the settings named, or --engine-version of a release whose choice servepilot models",
        )
    oldest, newest = kb.known_range("vllm")
    cc = res.gpu_cc
    return Unknown(
        "attention backend",
        f"which attention backend vLLM {version} picks, and which it refuses on compute "
        f"capability {cc[0]}.{cc[1]} (servepilot read vLLM {oldest} to {newest}; the nearest "
        "release's rules were applied)",
        f"--engine-version of a vLLM release servepilot has read ({oldest} to {newest})",
    )


def _unread_hub_model(dep) -> str | None:
    """Why a Hugging Face id in the command could not be read (cache or Hub), else None: an
    unread model leaves every model rule without its facts, so the check cannot pass."""
    from servepilot.checkpoint.hub import looks_like_model_id, split_quant_tag

    model = dep.launch.model
    if not model or dep.launch.shell.ssh_host or not (looks_like_model_id(model) or split_quant_tag(model)[1]):
        return None
    prefix = f"model {model}: "
    return next((n[len(prefix):] for n in dep.notes if n.startswith(prefix)), None)
