"""The attention path of vLLM releases before 0.10.0 on CUDA (knowledge/old_attention.yaml).

Before 0.10.0 vLLM had two engines: V0 (FlashAttention-2, else XFormers over PagedAttention)
and V1 (opt-in in 0.7.x, the default from 0.8.0 with a fallback to V0 for what it lacks).
`old_selection` says which engine and backend such a release runs for a deployment and what
it refuses; `decided` is False, with the reason, where a fact it needs is missing, so that
check keeps "unknown" instead of guessing from a neighbour release.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.engines import knowledge as kb

KNOWLEDGE = "servepilot/engines/vllm/knowledge/old_attention.yaml"

# _is_v1_supported_oracle features servepilot does not model; with VLLM_USE_V1 unset any of
# them sends 0.8-0.9 back to V0 (vllm/engine/arg_utils.py@v0.8.5), so V1 is not certain.
_UNMODELLED_V1_FALLBACKS = {  # option -> the values that keep V1 (EngineArgs defaults)
    "num_scheduler_steps": ("1",),
    "speculative_model": (),
    "speculative_config": (),
    "cpu_offload_gb": ("0", "0.0"),
    "preemption_mode": (),
    "scheduling_policy": ("fcfs",),
    "enable_prompt_adapter": (),
    "otlp_traces_endpoint": (),
    "task": ("auto", "generate"),
}


@dataclass(frozen=True)
class Refusal:
    category: str
    message: str  # the engine's own words, or what it does, for this deployment
    why: str  # servepilot's sentence on the cause
    source: str


@dataclass(frozen=True)
class OldSelection:
    decided: bool
    engine: str | None = None  # "V0" | "V1"
    backend: str | None = None
    refusal: Refusal | None = None
    why_undecided: str = ""
    source: str = ""


def _refused(engine: str, backend: str, message: str, why: str, source: str) -> OldSelection:
    """The backend a release picks here, and the engine's refusal of it at start-up."""
    return OldSelection(
        True, engine, backend, Refusal("attention_backend", message, why, source), source=source
    )


def _head_size_refused(head: int, kernel: str, sizes) -> str:
    """The selectors' own words for a head size a kernel has no code for."""
    return (
        f"ValueError: Head size {head} is not supported by {kernel}. "
        f"Supported head sizes are: {list(sizes)}."
    )


def _file():
    return kb.load_file("vllm", "old_attention")


def modelled(version: str | None) -> bool:
    """Whether `version` is a release before 0.10.0 whose attention path was read."""
    return bool(version) and kb.row_for(_file().modelled, version) is not None


def use_v1_env(dep) -> bool | None | str:
    """VLLM_USE_V1 as vLLM reads it (bool(int(value))): True/False, None when unset, or the
    raw text when it is not an integer (vLLM raises on it)."""
    raw = (dep.launch.shell.env or {}).get("VLLM_USE_V1")
    if raw is None or str(raw).strip() == "":
        return None
    try:
        return bool(int(str(raw).strip()))
    except ValueError:
        return str(raw)


def quantization_of(dep, res) -> str | None:
    """The quantization method ModelConfig would carry: the flag, else the checkpoint's."""
    given = dep.launch.get("quantization")
    if given:
        return str(given)
    if dep.spec is not None and dep.spec.format == "gguf":
        return "gguf"
    quant = getattr(res, "quant", None)
    return quant.method if quant is not None else None


def oracle_refusals(dep, res, version: str) -> list:
    """The _is_v1_supported_oracle rows this deployment trips, in the oracle's order."""
    cc = res.gpu_cc
    out = []
    for row in kb.rows_for(_file().v1_oracle, version):
        if row.feature == "compute_capability_below" and cc is not None and cc[0] < row.value:
            out.append((row, f"{cc[0]}.{cc[1]}"))
        elif row.feature == "dtype_not_in" and res.model_dtype and res.model_dtype not in row.value:
            out.append((row, res.model_dtype))
        elif row.feature == "quantization_in" and quantization_of(dep, res) in row.value:
            out.append((row, quantization_of(dep, res)))
        elif row.feature == "option_given" and dep.launch.get(row.value) not in (None, "", False):
            out.append((row, "--" + row.value.replace("_", "-")))
    return out


def _engine(dep, res, version: str) -> tuple[str | None, str]:
    """("V0"|"V1"|None, why): the engine the release runs; None when servepilot cannot tell."""
    row = kb.row_for(_file().v1_engine, version)
    if row is None or not row.exists:
        return "V0", "no V1 engine in this release"
    env = use_v1_env(dep)
    if isinstance(env, str):
        return None, f"VLLM_USE_V1={env} is not an integer (vLLM reads it with int())"
    if env is not None:
        return ("V1" if env else "V0"), f"VLLM_USE_V1={int(env)}"
    if not row.default_on:
        return "V0", "VLLM_USE_V1 unset (V1 is opt-in)"
    if oracle_refusals(dep, res, version):
        return "V0", "VLLM_USE_V1 unset: the V1 oracle falls back to V0"
    unmodelled = [
        k
        for k, keeps_v1 in _UNMODELLED_V1_FALLBACKS.items()
        if dep.launch.get(k) not in (None, False, "") and str(dep.launch.get(k)) not in keeps_v1
    ]
    if unmodelled:
        return None, (
            f"--{unmodelled[0].replace('_', '-')} may send vLLM {version} back to V0 "
            "(its V1 oracle's other features were not modelled)"
        )
    return "V1", "VLLM_USE_V1 unset: V1 by default"


def old_selection(dep, res) -> OldSelection:
    """Engine, backend and refusal of a pre-0.10 vLLM release for `dep` on its first GPU."""
    version = dep.engine_version
    if not modelled(version):
        return OldSelection(False, why_undecided=f"vLLM {version}'s attention path was not read")
    cc = res.gpu_cc
    if cc is None:
        return OldSelection(False, why_undecided="the GPU's compute capability is unknown")
    engine, why = _engine(dep, res, version)
    if engine is None:
        return OldSelection(False, why_undecided=why)
    forced = str((dep.launch.shell.env or {}).get("VLLM_ATTENTION_BACKEND", "") or "").upper()
    if engine == "V1":
        return _v1(dep, res, version, cc, forced, why)
    return _v0(dep, res, version, cc, forced, why)


def _v1(dep, res, version, cc, forced, why) -> OldSelection:
    only_fa = kb.row_for(_file().v1_flash_attn_only, version)
    ccn = cc[0] * 10 + cc[1]
    if only_fa is not None:  # 0.7.x: FlashAttention for every model, forced or not
        if ccn < only_fa.fa_min_cc:
            return _refused(
                "V1",
                "FLASH_ATTN_VLLM_V1",
                only_fa.message,
                f"{why}: vLLM {version}'s V1 engine runs only FlashAttention, which needs "
                f"compute capability {only_fa.fa_min_cc / 10:.1f} (this GPU: {cc[0]}.{cc[1]})",
                only_fa.source,
            )
        if res.use_mla or (dep.spec is not None and dep.spec.is_mla):
            return OldSelection(
                False,
                why_undecided=f"vLLM {version}'s V1 engine with an MLA model (FlashAttention "
                "over MLA or expanded heads) was not modelled",
            )
        if res.model_dtype not in ("float16", "bfloat16", None):
            return OldSelection(
                False,
                why_undecided=f"vLLM {version}'s V1 FlashAttention with dtype "
                f"{res.model_dtype} was not modelled",
            )
    elif oracle_refusals(dep, res, version):
        # VLLM_USE_V1=1 with a feature V1 lacks: the config stage raises first (SP-V1-001)
        return OldSelection(True, "V1", None, source=KNOWLEDGE)
    elif res.use_mla:
        return OldSelection(True, "V1", "MLA (FLASHMLA or TRITON_MLA)", source=KNOWLEDGE)
    if forced and forced != "FLASH_ATTN" and only_fa is None:
        return OldSelection(
            False,
            why_undecided=f"VLLM_ATTENTION_BACKEND={forced} on vLLM {version}'s V1 engine "
            "was not modelled",
        )
    head = res.head_size
    row = kb.row_for(_file().v1_selection, version)
    if head is None:
        return OldSelection(False, why_undecided="the model's head size is unknown")
    if row is None:
        return OldSelection(False, why_undecided=f"vLLM {version}'s V1 backend choice was not read")
    fa_takes = head in row.fa_head_sizes
    if row.other_head_sizes and (
        not fa_takes or res.model_dtype not in ("float16", "bfloat16", None)
    ):
        return OldSelection(True, "V1", row.other_head_sizes, source=row.source)
    if cc[0] in (row.flashinfer_first_majors or []) and not fa_takes:
        # FlashInfer when the package imports, else FlashAttention, which would refuse:
        # the host decides
        return OldSelection(
            False,
            why_undecided=f"vLLM {version}'s V1 engine takes FlashInfer on compute capability "
            f"{cc[0]}.x if it is installed, else FlashAttention, which has no "
            f"head size {head}",
        )
    if fa_takes:
        return OldSelection(True, "V1", "FLASH_ATTN_VLLM_V1", source=row.source)
    return _refused(
        "V1",
        "FLASH_ATTN_VLLM_V1",
        _head_size_refused(head, "FlashAttention", row.fa_head_sizes),
        f"{why}: vLLM {version}'s V1 engine runs FlashAttention here, which has no kernel for "
        f"head size {head}",
        row.source,
    )


def _v0(dep, res, version, cc, forced, why) -> OldSelection:
    row = kb.row_for(_file().v0_selection, version)
    if row is None:
        return OldSelection(False, why_undecided=f"vLLM {version}'s V0 selection was not read")
    if res.use_mla or (dep.spec is not None and dep.spec.is_mla):
        return OldSelection(
            True, "V0", "MLA or FlashAttention (DeepSeek MLA path)", source=row.source
        )
    if forced == "FLASHINFER":
        return OldSelection(True, "V0", "FLASHINFER", source=row.source)  # cc < 8.0: SP-ATTN-008
    if forced not in ("", "FLASH_ATTN", "XFORMERS"):
        return OldSelection(
            False,
            why_undecided=f"VLLM_ATTENTION_BACKEND={forced} on vLLM {version}'s V0 engine "
            "was not modelled",
        )
    head = res.head_size
    if head is None:
        return OldSelection(False, why_undecided="the model's head size is unknown")
    fallback = (
        _v0_fallback(dep, res, row, cc, head)
        if forced != "XFORMERS"
        else "VLLM_ATTENTION_BACKEND=XFORMERS"
    )
    if fallback is None:
        return OldSelection(True, "V0", "FLASH_ATTN", source=row.source)
    if head in row.paged_head_sizes:
        return OldSelection(True, "V0", "XFORMERS", source=row.source)
    return _refused(
        "V0",
        "XFORMERS",
        _head_size_refused(head, "PagedAttention", row.paged_head_sizes),
        f"{why}: vLLM {version}'s V0 engine falls back to XFormers ({fallback}), whose "
        f"PagedAttention has no kernel for head size {head}",
        row.source,
    )


def _v0_fallback(dep, res, row, cc, head) -> str | None:
    """Why the V0 selector leaves FlashAttention-2 for XFormers, in its own order; None: it
    keeps it."""
    if cc[0] * 10 + cc[1] < row.fa_min_cc:
        return f"compute capability {cc[0]}.{cc[1]} is below {row.fa_min_cc / 10:.1f}"
    if res.model_dtype and res.model_dtype not in ("float16", "bfloat16"):
        return f"dtype {res.model_dtype}"
    kv = str(dep.launch.get("kv_cache_dtype") or "auto")
    if kv.startswith("fp8") and cc[0] not in (row.fa_fp8_kv_majors or []):
        return f"KV cache {kv}"
    block = dep.launch.get("block_size")
    if block is not None and int(block) % 16:
        return f"block size {block}"
    if head not in row.fa_head_sizes:
        return f"head size {head} is not one FlashAttention-2 takes"
    return None


def pp_refusal(dep, version: str | None):
    """(row, architectures outside the list) when 0.5.1-0.6.2 refuse this pipeline-parallel
    model."""
    if not version or dep.spec is None or not dep.spec.architectures:
        return None
    if dep.launch.pipeline_parallel_size <= 1:
        return None
    row = kb.row_for(_file().pp_architectures, version)
    if row is None:
        return None
    outside = [a for a in dep.spec.architectures if a not in row.architectures]
    return (row, outside) if outside else None


def bnb_config_refusal(dep, res, version: str | None):
    """The first bnb_parallel_config row this bitsandbytes deployment trips (0.5.1-0.6.1), or
    None."""
    if not version or quantization_of(dep, res) != "bitsandbytes":
        return None
    launch = dep.launch
    for row in kb.rows_for(_file().bnb_parallel_config, version):
        if (
            row.condition == "tp_or_pp"
            and launch.tensor_parallel_size * launch.pipeline_parallel_size > 1
        ):
            return row
        if row.condition == "not_enforce_eager" and not launch.get("enforce_eager"):
            return row
    return None


def kv_connector(dep) -> str | None:
    """The kv_connector named in --kv-transfer-config (a JSON text or a dict), or None."""
    import json

    value = dep.launch.get("kv_transfer_config")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return (
        str(value.get("kv_connector"))
        if isinstance(value, dict) and value.get("kv_connector")
        else None
    )


def lmcache_v0_refusal(dep, res):
    """(row, selection) when LMCache's V0 adapter will meet a backend it does not accept, else
    None."""
    version = dep.engine_version
    connector = kv_connector(dep)
    if not version or connector is None:
        return None
    row = kb.row_for(_file().lmcache_v0_connector, version)
    if row is None or connector != row.connector:
        return None
    sel = old_selection(dep, res)
    if not sel.decided or sel.engine != "V0" or sel.refusal is not None:
        return None
    backend = "MLA" if str(sel.backend).startswith("MLA") else sel.backend
    return None if backend in row.accepted_backends else (row, sel)


def bnb_model_class_refusal(dep, res):
    """(row, architecture) when a 0.5.3-0.6.6 release's bitsandbytes loader has no mapping for the
    model class of a registered architecture, else None."""
    from servepilot.engines.vllm.release import architecture_status

    version = dep.engine_version
    if (
        not version
        or dep.spec is None
        or not dep.spec.architectures
        or quantization_of(dep, res) != "bitsandbytes"
    ):
        return None
    row = kb.row_for(_file().bnb_model_classes, version)
    if row is None:
        return None
    arch = dep.spec.architectures[0]
    if (
        arch in row.architectures
        or arch in (row.unsure or [])
        or architecture_status(arch, version)[0] != "native"
    ):
        return None  # supported, decided by __new__, or not served at all (SP-ARCH-001's)
    return row, arch
