"""SGLang's attention backend choice for one launch, from knowledge/attention.yaml.

Follows the order SGLang itself applies (see the head of the YAML file): argparse choices,
the server_args asserts and page-size forcing, the default pick, the MLA check and the
fa3 + fp8_e5m2 switch in ModelRunner, then the backend constructors' asserts.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.engines import knowledge as kb

ENGINE = "sglang"


@dataclass(frozen=True)
class Choice:
    backend: str | None  # what SGLang will run with (None when it refuses)
    page_size: int
    forced_by: str | None  # "--attention-backend" or None (SGLang's default)
    error: str | None = None  # the engine's own text when it refuses
    category: str | None = None  # servepilot category of the refusal
    stage: str | None = None  # server_args | model_runner | backend_init | argparse
    source: str = ""
    notes: tuple[str, ...] = ()


def modelled(version: str) -> bool:
    return kb.row_for(kb.load_file(ENGINE, "attention")["defaults"], version) is not None


def read_span() -> str:
    """The releases whose selection was read, as "first to last" (from the defaults' ranges,
    each ">=A,<B" with B the line after the last one read)."""
    from packaging.version import Version

    lows, highs = [], []
    for row in kb.load_file(ENGINE, "attention")["defaults"]:
        low, high = (part.lstrip("<>=") for part in row["versions"].split(","))
        lows.append(Version(low))
        highs.append(Version(high))
    last = max(highs)
    return f"{min(lows)} to {last.major}.{last.minor}.{last.micro - 1}"


def choose(version: str, cc: tuple[int, int], *, use_mla: bool, arch: str | None,
           sparse: bool, kv_cache_dtype: str, backend: str | None,
           page_size: int | None, asymmetric_kv: bool = False) -> Choice | None:
    """None when this release line's selection was not read, or when the model's architecture
    has model-specific rules servepilot does not model (and the generic rules refuse nothing)."""
    data = kb.load_file(ENGINE, "attention")
    default_row = kb.row_for(data["defaults"], version)
    if default_row is None:
        return None
    major = cc[0]
    forced_by = "--attention-backend" if backend else None
    page = page_size or 1
    choices = kb.row_for(data["choices"], version)
    if backend and choices and backend not in choices["values"]:
        text = (f"argument --attention-backend: invalid choice: '{backend}' "
                f"(choose from {', '.join(repr(v) for v in choices['values'])})")
        return Choice(None, page, forced_by, text, "attention_backend", "argparse",
                      choices.source)
    refusals = kb.rows_for(data["refusals"], version)
    page_row = kb.row_for(data["page_size"], version)
    in_server_args = default_row["where"].startswith("ServerArgs")

    chosen = backend
    if chosen is None and in_server_args:
        chosen = _default(default_row, major, use_mla, arch, sparse, version, data,
                           asymmetric_kv)
    elif chosen is None:
        # the architecture overrides live in ServerArgs even while ModelRunner picks the generic
        # default (0.5.3): their choice meets the server_args asserts
        chosen = _override(default_row, major, arch, sparse)
    # server_args: page-size forcing and asserts, in one pass per backend name
    refused = _refused(refusals, "server_args", chosen, major, use_mla, kv_cache_dtype, arch)
    if refused:
        return _refusal(refused, page, forced_by, kv_cache_dtype)
    page = _page(page_row, chosen, page, major, use_mla)
    # ModelRunner
    notes = []
    if chosen is None:
        chosen = _default(default_row, major, use_mla, arch, sparse, version, data, asymmetric_kv)
    forced_mla = default_row.get("mla_forces")
    if use_mla and forced_mla and chosen != forced_mla:
        # before 0.4.4 ModelRunner overwrote the backend of every MLA model, named or not
        notes.append(f"SGLang {version} runs every MLA model on {forced_mla}: ModelRunner "
                     f"replaces {chosen}")
        chosen = forced_mla
    mla_row = kb.row_for(data["mla_backends"], version)
    if use_mla and backend and mla_row and backend not in mla_row["values"]:
        return Choice(None, page, forced_by, f"Invalid attention backend for MLA: {backend}",
                      "attention_backend", "model_runner", mla_row.source)
    fallback = kb.row_for(data["fa3_e5m2_fallback"], version)
    if chosen == "fa3" and kv_cache_dtype == "fp8_e5m2" and fallback:
        chosen = fallback["backend"]
        notes.append("FlashAttention 3 takes fp8 only as e4m3: SGLang switches fa3 to "
                     f"{chosen} for an fp8_e5m2 KV cache")
    if choices and chosen not in choices["values"]:
        return Choice(None, page, forced_by, f"Invalid attention backend: {chosen}",
                      "attention_backend", "backend_init", choices.source)
    refused = _refused(refusals, "backend_init", chosen, major, use_mla, kv_cache_dtype, arch)
    if refused:
        return _refusal(refused, page, forced_by, kv_cache_dtype)
    unmodelled = kb.row_for(data["unmodelled_architectures"], version)
    if unmodelled and arch and (arch in unmodelled["values"]
                                or any(arch.startswith(p) for p in unmodelled["prefix"] or ())):
        return None  # SGLang's model-specific rules may pick or refuse differently
    return Choice(chosen, page, forced_by, source=default_row.source, notes=tuple(notes))


def _override(row, major, arch, sparse) -> str | None:
    for override in row.get("arch_overrides") or ():
        if arch in override["archs"] and major in override["cc_major"] \
                and not (override.get("not_sparse") and sparse):
            return override["backend"]
    return None


def _default(row, major, use_mla, arch, sparse, version, data, asymmetric_kv=False) -> str:
    overridden = _override(row, major, arch, sparse)
    if overridden:
        return overridden
    fa3_archs = kb.row_for(data["fa3_default_architectures"], version)
    for rule in row["mla" if use_mla else "mha"]:
        if rule.get("cc_major") is not None and major not in rule["cc_major"]:
            continue
        if rule.get("asymmetric_kv") and not asymmetric_kv:
            continue
        if rule.get("fa3_arch") and not (fa3_archs and arch in fa3_archs["values"]):
            continue
        return rule["backend"]
    raise AssertionError("every default list ends with an unconditional rule")


def _refused(rows, stage, backend, major, use_mla, kv, arch=None):
    for r in rows:
        if r["stage"] != stage or r["backend"] != backend:
            continue
        if r.get("archs") is not None and arch not in r["archs"]:
            continue
        if r.get("mla") is not None and r["mla"] != use_mla:
            continue
        if r.get("fa3_rule"):
            if (major == 8 and not use_mla) or major == 9:
                continue
        elif r.get("cc_major_not_in") is not None:
            if major in r["cc_major_not_in"]:
                continue
        if r.get("cc_major_in") is not None and major not in r["cc_major_in"]:
            continue
        if r.get("kv_not_in") is not None and kv in r["kv_not_in"]:
            continue
        if r.get("kv_in") is not None and kv not in r["kv_in"]:
            continue
        return r
    return None


def _refusal(row, page, forced_by, kv) -> Choice:
    # a few of SGLang's messages print the --kv-cache-dtype given (an f-string)
    error = row["error"].replace("{kv_cache_dtype}", kv)
    return Choice(None, page, forced_by, error, row["category"], row["stage"], row.source)


def _page(row, backend, page, major, use_mla) -> int:
    if row is None:
        return page
    mha_sm100 = row.get("forced_mha_sm100") or {}
    if backend in mha_sm100 and major == 10 and not use_mla:
        return mha_sm100[backend]
    if backend not in row["forced"]:
        return page
    keeps = (row.get("keeps") or {}).get(backend)
    if keeps and page in keeps:
        return page
    return row["forced"][backend]
