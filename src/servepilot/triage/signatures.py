"""Error signatures: a data table (signatures.yaml) and the code that matches a message to one.

Each row names one failure the engines really print, with the message text as the engine
writes it (`source` says where), its category (DESIGN.md words), an explanation, remedies,
and how it ranks:

- `priority`: when several rows match the same message, the highest wins (a specific
  "NCCL ... /dev/shm" row beats the generic "NCCL error" row);
- `tier` decides which *event* of a log is the root cause (see diagnosis.py): `cause`
  (default) rows beat `generic` rows (true but vague: "NCCL error", "CUDA error: unspecified
  launch failure"), which beat unmatched exceptions, which beat `echo` rows (wrappers that
  repeat an error printed elsewhere: "Engine core initialization failed");
- `benign: true` rows are known non-failures (a fallback notice) and never a root cause;
- `unwrap: NAME` names the group holding a wrapped message ("Worker failed with error
  '...'"): the inner message is matched again and wins when it matches at a tier no vaguer
  than the wrapper's;
- `refine` rules re-categorise by context (the traceback frames and nearby error lines),
  e.g. a CUDA OOM inside CUDA graph capture is `cuda_graph`, not `oom_weights`;
- `by_phase` maps the start-up phase the process was in (triage/markers.py PHASES, or
  `serving` after the readiness line) to a category, for errors whose meaning depends on
  it: one CUDA OOM is the weights while loading, the KV cache while profiling, CUDA graphs
  during capture, a request's when serving. It applies when no refine rule matched (the
  traceback frames, when there are any, are the more direct evidence). A refine rule or a
  phase may carry its own `remedies`, which replace the signature's when it decides: the fix
  for a KV cache that did not fit is not the weights' fix;
- `waits_on_peers: true` marks a rank's report that it waited for the others and timed out
  (NCCL's watchdog): when another process of the launch failed, that failure is the cause;
- `consequence: true` marks a vague report of a failure printed first elsewhere (a worker that
  died, a Ray actor that died, a kernel fault reported at the next synchronisation): an
  unknown error printed before it is what it reports (diagnosis.py rule 4);
- `latent: true` marks a fault the process goes on past until it bites (a build without code
  for the GPU): a later start-up phase is no sign it was survived (diagnosis.py _survived);
- `analyzer` names a function below that reads a structured message (the attention
  selector's per-backend reasons).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

from servepilot.categories import REMEDY_KINDS, check_category
from servepilot.engines.registry import ENGINE_NAMES as ENGINES

TIERS = ("cause", "generic", "echo")
PHASES = ("weights_loading", "kv_cache_profiling", "cuda_graph_capture", "after_cuda_graph_capture", "serving")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class TriageRemedy:
    """One fix for a diagnosed failure; `check` names the servepilot check that covers it."""

    kind: str  # flag | overlay | upgrade | hardware | env (categories.REMEDY_KINDS)
    change: str
    tradeoff: str
    check: str | None = None  # e.g. "SP-KV-001"


@dataclass(frozen=True)
class RefineRule:
    pattern: re.Pattern[str]
    category: str
    explanation: str | None
    # what to do when this rule decides, where the signature's own remedies are for another part
    # of the launch (a weights-sized fix for an allocation that was the KV cache's); () keeps them
    remedies: tuple[TriageRemedy, ...] = ()


@dataclass(frozen=True)
class Signature:
    id: str
    category: str
    patterns: tuple[re.Pattern[str], ...]
    explanation: str
    remedies: tuple[TriageRemedy, ...]
    source: str
    engines: tuple[str, ...]
    priority: int = 50
    tier: str = "cause"
    benign: bool = False
    unwrap: str | None = None
    refine: tuple[RefineRule, ...] = ()
    analyzer: str | None = None
    examples: tuple[str, ...] = ()
    by_phase: tuple[tuple[str, str, str], ...] = ()  # (phase, category, explanation)
    by_phase_remedies: tuple[tuple[str, tuple[TriageRemedy, ...]], ...] = ()  # as RefineRule's
    waits_on_peers: bool = False  # a rank that timed out waiting for others (see diagnosis.py)
    consequence: bool = False  # reports a failure printed first elsewhere (see diagnosis.py)
    latent: bool = False  # a fault the process goes on past until it bites (see diagnosis.py)


@dataclass(frozen=True)
class Match:
    """A signature applied to one message: the category and explanation after refinement."""

    signature: Signature
    category: str
    explanation: str
    remedies: tuple[TriageRemedy, ...]
    groups: dict
    evidence: str = "message"  # what decided the category: message | frames | phase | accounting
    # competing readings the message itself gives (category, explanation): an analyzer's
    # second reading, shown as an alternative with its own confidence
    rivals: tuple[tuple[str, str], ...] = ()

    @property
    def tier(self) -> str:
        return self.signature.tier


class SignatureDataError(ValueError):
    """signatures.yaml is malformed (a packaging bug, caught by the test suite)."""


def _compile(pattern: str, where: str) -> re.Pattern[str]:
    try:
        # Case-insensitive: reporters retype messages ("valueerror: ... trust_remote_code=true").
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise SignatureDataError(f"{where}: bad regex {pattern!r}: {exc}") from exc


def _remedy(raw: dict, where: str) -> TriageRemedy:
    kind = raw.get("kind")
    if kind not in REMEDY_KINDS:
        raise SignatureDataError(f"{where}: remedy kind {kind!r} not in {REMEDY_KINDS}")
    for key in ("change", "tradeoff"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise SignatureDataError(f"{where}: remedy needs a non-empty {key!r}")
    return TriageRemedy(kind=kind, change=raw["change"], tradeoff=raw["tradeoff"], check=raw.get("check"))


def build_signature(raw: dict) -> Signature:
    """Validate one data row into a Signature; raises SignatureDataError naming the row."""
    sid = raw.get("id")
    where = f"signature {sid!r}"
    if not isinstance(sid, str) or not sid:
        raise SignatureDataError(f"signature without an id: {raw!r:.80}")
    missing = [k for k in ("category", "patterns", "explanation", "source", "engines") if not raw.get(k)]
    if missing:
        raise SignatureDataError(f"{where}: missing {', '.join(missing)}")
    try:
        check_category(raw["category"])
        for rule in raw.get("refine", ()):
            check_category(rule["category"])
    except (ValueError, KeyError) as exc:
        raise SignatureDataError(f"{where}: {exc}") from exc
    tier = raw.get("tier", "cause")
    if tier not in TIERS:
        raise SignatureDataError(f"{where}: tier {tier!r} not in {TIERS}")
    engines = tuple(raw["engines"])
    if any(e not in ENGINES for e in engines):
        raise SignatureDataError(f"{where}: engines {engines} not within {ENGINES}")
    analyzer = raw.get("analyzer")
    if analyzer is not None and analyzer not in ANALYZERS:
        raise SignatureDataError(f"{where}: unknown analyzer {analyzer!r}")
    patterns = tuple(_compile(p, where) for p in raw["patterns"])
    by_phase, phase_remedies = [], []
    for phase, rule in (raw.get("by_phase") or {}).items():
        if phase not in PHASES:
            raise SignatureDataError(f"{where}: by_phase names {phase!r}, not one of {PHASES}")
        try:
            check_category(rule["category"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SignatureDataError(f"{where}: by_phase {phase}: {exc}") from exc
        by_phase.append((phase, rule["category"], rule.get("explanation") or raw["explanation"]))
        if rule.get("remedies"):
            phase_remedies.append((phase, tuple(_remedy(r, where) for r in rule["remedies"])))
    unwrap = raw.get("unwrap")
    if unwrap and not any(unwrap in p.groupindex for p in patterns):
        raise SignatureDataError(f"{where}: unwrap group {unwrap!r} is in no pattern")
    return Signature(
        id=sid,
        category=raw["category"],
        patterns=patterns,
        explanation=raw["explanation"].strip(),
        remedies=tuple(_remedy(r, where) for r in raw.get("remedies", ())),
        source=raw["source"],
        engines=engines,
        priority=int(raw.get("priority", 50)),
        tier=tier,
        benign=bool(raw.get("benign", False)),
        unwrap=unwrap,
        waits_on_peers=bool(raw.get("waits_on_peers", False)),
        consequence=bool(raw.get("consequence", False)),
        latent=bool(raw.get("latent", False)),
        refine=tuple(
            RefineRule(
                _compile(r["when"], where), r["category"], r.get("explanation"),
                tuple(_remedy(x, where) for x in r.get("remedies", ())),
            )
            for r in raw.get("refine", ())
        ),
        analyzer=analyzer,
        examples=tuple(raw.get("examples", ())),
        by_phase=tuple(by_phase),
        by_phase_remedies=tuple(phase_remedies),
    )


def parse_signature_rows(rows: list) -> tuple[Signature, ...]:
    """Build and cross-check a signature table (ids unique)."""
    if not isinstance(rows, list):
        raise SignatureDataError("signatures.yaml must hold a list of signatures")
    sigs = tuple(build_signature(r) for r in rows)
    seen: set[str] = set()
    for s in sigs:
        if s.id in seen:
            raise SignatureDataError(f"duplicate signature id {s.id!r}")
        seen.add(s.id)
    # Highest priority first, so the first match is the best one.
    return tuple(sorted(sigs, key=lambda s: -s.priority))


@functools.cache
def load_signatures() -> tuple[Signature, ...]:
    """The packaged signature table, parsed once per process."""
    from servepilot.datafile import load_yaml_resource

    return parse_signature_rows(load_yaml_resource("servepilot.triage", "signatures.yaml"))


class _Interp(dict):
    def __missing__(self, key):
        return "?"


_EMPTY_PAREN = re.compile(r"\s*\(\?\)")


def _render(template: str, groups: dict) -> str:
    """Fill {group} placeholders; a group the message did not have reads "?" (and "(?)" goes)."""
    try:
        text = template.format_map(_Interp({k: v for k, v in groups.items() if v is not None}))
    except (ValueError, IndexError):
        return template
    return _EMPTY_PAREN.sub("", text)


class Matcher:
    """Matches messages against a signature table, optionally limited to one engine."""

    def __init__(self, signatures: tuple[Signature, ...], engine: str | None = None):
        self.signatures = tuple(s for s in signatures if engine is None or engine in s.engines)
        self._misses: set[str] = set()

    def _raw(self, message: str, skip_echo: bool = False) -> tuple[Signature, dict] | None:
        # Misses are cached by the message with its numbers blanked: serving logs repeat the
        # same request and progress lines with different numbers, and ~170 regex searches
        # per distinct line would otherwise dominate the tail of a big log.
        shape = ("\x00" if skip_echo else "") + _DIGITS.sub("#", message)
        if shape in self._misses:
            return None
        for sig in self.signatures:
            if skip_echo and sig.tier == "echo":
                continue
            for pattern in sig.patterns:
                m = pattern.search(message)
                if m:
                    return sig, m.groupdict()
        if len(self._misses) < 100_000:
            self._misses.add(shape)
        return None

    def match(self, message: str, context: str = "", phase: str | None = None) -> Match | None:
        """The best signature for a message.

        `context` (frames, nearby lines) feeds refine rules; `phase` (where the start-up
        was) feeds `by_phase` when no refine rule decided.
        """
        raw = self._raw(message[:4000])
        if raw is None:
            return None
        sig, groups = raw
        if sig.unwrap and groups.get(sig.unwrap):
            inner = self._raw(groups[sig.unwrap][:4000], skip_echo=True)
            # The wrapped message wins unless it is vaguer than the wrapper: SGLang's "Capture
            # cuda graph failed: <gloo: Connection closed by peer>" is a capture failure first.
            if inner is not None and not inner[0].benign and TIERS.index(inner[0].tier) <= TIERS.index(sig.tier):
                return self._finish(inner[0], inner[1], message + "\n" + context, phase)
            if inner is None and sig.tier != "echo":
                # The wrapper says where the start-up was ("Capture cuda graph failed: ..."); a
                # wrapped message no signature knows may still say what broke there, and that is
                # the cause: a gloo connection closed by a peer during capture is a failure of
                # the ranks' communication, not of graph capture.
                return self._words_of_inner(sig, groups, context + "\n" + message, phase)
        return self._finish(sig, groups, context + "\n" + message, phase)

    def _words_of_inner(self, sig: Signature, groups: dict, context: str, phase: str | None) -> Match:
        from servepilot.triage.keywords import guess_category

        found = self._finish(sig, groups, context, phase)
        guess = guess_category(groups[sig.unwrap])
        if guess is None or guess[0] == found.category or found.evidence != "message":
            return found
        return replace(
            found,
            category=guess[0],
            explanation=f"{found.explanation} The wrapped message names {guess[1]!r}: a {guess[0]} failure.",
        )

    def _finish(self, sig: Signature, groups: dict, context: str, phase: str | None = None) -> Match:
        category, explanation = sig.category, _render(sig.explanation, groups)
        remedies = sig.remedies
        evidence = "message"
        for rule in sig.refine:
            if rule.pattern.search(context):
                category = rule.category
                evidence = "frames"
                if rule.explanation:
                    explanation = _render(rule.explanation, groups)
                remedies = rule.remedies or remedies
                break
        else:
            evidence_of_phase = "phase"
            if phase is None and sig.by_phase and _graphs_captured(context):
                # no progress line, but PyTorch's accounting says this process already holds
                # captured graphs: the weights and the KV cache came before them
                phase, evidence_of_phase = "after_cuda_graph_capture", "accounting"
            for when, phase_category, phase_explanation in sig.by_phase:
                if when == phase:
                    category, explanation, evidence = (
                        phase_category, _render(phase_explanation, groups), evidence_of_phase
                    )
                    remedies = dict(sig.by_phase_remedies).get(phase, remedies)
                    break
        remedies = tuple(
            TriageRemedy(r.kind, _render(r.change, groups), _render(r.tradeoff, groups), r.check) for r in remedies
        )
        rivals: tuple[tuple[str, str], ...] = ()
        if sig.analyzer:
            category, explanation, remedies, rivals = ANALYZERS[sig.analyzer](
                groups, category, explanation, remedies, context=context
            )
        return Match(sig, category, explanation, remedies, groups, evidence, rivals)


# PyTorch's OOM message counts the memory of private pools ("with 22.00 MiB allocated in private
# pools (e.g., CUDA Graphs), ", printed only when that amount is not zero:
# c10/cuda/CUDACachingAllocator.cpp@v2.5.0, the same words in libc10_cuda.so of torch 2.14.1).
# CUDA graphs allocate from such pools while they are captured and keep them, so a process that
# holds some has begun capturing: its weights and KV cache were made before. (vLLM's sleep mode
# allocates from a pool too; its own allocator's line, vllm-cumem-allocator-oom, comes first.)
_PRIVATE_POOLS = re.compile(
    r"with (?P<amount>[\d.]+) (?:[KMGTP]i?B|bytes) allocated in private pools"
)


def _graphs_captured(context: str) -> bool:
    found = _PRIVATE_POOLS.search(context)
    return found is not None and float(found.group("amount")) > 0


# --- analyzers ------------------------------------------------------------------------------

_REASON_ENTRY = re.compile(r"(?P<backend>[A-Z][A-Z0-9_]+):\s*\[(?P<reasons>[^\]]*)\]")


def attention_reasons(groups, category, explanation, remedies, context=""):
    """Judge vLLM's attention selector failure by its per-backend reasons.

    The rule: the selector failing is `attention_backend`, unless the KV cache dtype is all
    that stands in the way of some backend that accepts this compute capability (and is not
    rejected for sparse/MLA/head-size mismatch): it lists "kv_cache_dtype not supported" and
    nothing else but the block size. Then changing the KV dtype is a fix: `kv_cache_dtype`.
    When other such backends object to something else too (a multimodal prefix, the head
    size), that reading competes: it is given as a rival (an alternative with a confidence).
    (vllm/v1/attention/backend.py@v0.16.0 validate_configuration writes these reasons.)

    Returns (category, explanation, remedies, rivals).
    """
    text = groups.get("reasons") or ""
    entries = {
        m.group("backend"): [r.strip() for r in m.group("reasons").split(",")] for m in _REASON_ENTRY.finditer(text)
    }
    if not entries and text:
        entries = {"selected": [r.strip(" '\"") for r in text.strip("[]").split(",")]}
    usable = {b: rs for b, rs in entries.items() if not any("compute capability" in r for r in rs)}
    kv_blocked = sorted(
        b for b, rs in usable.items()
        if any("kv_cache_dtype" in r for r in rs)
        and all(("kv_cache_dtype" in r or "block" in r) for r in rs)
    )
    if not kv_blocked:
        return category, explanation, remedies, ()
    others = {b: rs for b, rs in usable.items() if b not in kv_blocked}
    names = ", ".join(kv_blocked)
    if others:
        explanation = (
            f"No attention backend accepts this configuration, and for {names} the KV cache "
            f"dtype is the only objection: a KV cache dtype {names} supports lets vLLM choose "
            f"it. The other backends this GPU supports ({', '.join(sorted(others))}) object to "
            "more than the KV cache dtype."
        )
    else:
        explanation = (
            "No attention backend accepts the KV cache dtype here: the backends that support "
            f"this GPU ({names}) reject it only for kv_cache_dtype. The KV cache dtype (often "
            "inherited from the checkpoint's quantization config when --kv-cache-dtype is auto) "
            "is the blocker."
        )
    kv_remedies = (
        TriageRemedy(
            kind="overlay",
            change="servepilot fix: overlay the checkpoint without its kv_cache_scheme / kv_cache_quant_algo keys, "
                   "then --kv-cache-dtype auto",
            tradeoff="KV cache in the model dtype (BF16): twice the bytes per token of FP8, so about half the KV "
                     "tokens",
            check="SP-KV-001",
        ),
        TriageRemedy(
            kind="flag",
            change="--kv-cache-dtype bfloat16 (where the engine version lets the flag override the checkpoint)",
            tradeoff="twice the KV bytes per token of FP8",
            check="SP-KV-001",
        ),
    )
    rivals = ()
    if others:
        why = "; ".join(f"{b}: {', '.join(rs)}" for b, rs in sorted(others.items()))
        rivals = ((
            "attention_backend",
            "Read the other way, the backends that accept the KV cache dtype lack what this "
            f"model's attention needs ({why}): another backend build or vLLM version is the way.",
        ),)
    return "kv_cache_dtype", explanation, kv_remedies + tuple(remedies), rivals


# SGLang's scheduler line, printed once the pool is made ("max_total_num_tokens=%d, ...,
# context_len=%d", sglang/srt/managers/scheduler.py@v0.4.5.post3, @v0.5.23), as the Assembler
# carries it into an event's launch settings (events._POOL_LINE).
_POOL_SETTING = re.compile(r"\[launch setting: sglang-pool-tokens=(?P<pool>\d+)\]")
_CONTEXT_SETTING = re.compile(r"\[launch setting: sglang-context-len=(?P<ctx>\d+)\]")
# What SGLang subtracts from the smaller of the two: max_req_len = min(context_len - 1,
# max_total_num_tokens - 1), max_req_input_len = max_req_len - 5 (sglang/srt/managers/
# tp_worker.py@v0.3.6, @v0.4.5.post3, @v0.5.23).
_INPUT_LIMIT_MARGIN = 6


def _is_designed_length(tokens: int) -> bool:
    """Whether a token count looks set by a person (a model config's or --context-length's
    2^k or round thousands), not measured out of free memory (the KV pool's size)."""
    return tokens % 1024 == 0 or tokens % 1000 == 0


def sglang_input_limit(groups, category, explanation, remedies, context=""):
    """Judge SGLang's "Input length (N tokens) exceeds the maximum allowed length (M tokens)".

    M + 6 is the smaller of the model's context length and the KV pool's token count
    (_INPUT_LIMIT_MARGIN). When the pool is the smaller, the request fits the advertised
    context but not the pool: the pool was sized too small (`oom_kv_cache`); when it is the
    context, the request is longer than the model serves (`max_model_len`). The scheduler's
    line, when the log holds it, names both; without it a designed-looking bound is read as
    the context, any other as the pool, and the other reading is given as a rival.

    Returns (category, explanation, remedies, rivals).
    """
    bound = int(groups.get("max") or 0) + _INPUT_LIMIT_MARGIN
    pool = _POOL_SETTING.search(context)
    ctx = _CONTEXT_SETTING.search(context)
    decided = pool is not None and ctx is not None
    if decided:
        pool_bound = int(pool.group("pool")) < int(ctx.group("ctx"))
    else:
        pool_bound = not _is_designed_length(bound)
    pool_reading = (
        f"The longest input SGLang accepts here ({groups.get('max')} tokens) is set by its KV "
        f"pool, about {bound} tokens, not by the model's context: the pool "
        "(--mem-fraction-static of what the GPUs leave after the weights) was sized too small "
        "for the context the server advertises."
    )
    pool_remedies = (
        TriageRemedy("flag",
                     "raise --mem-fraction-static, add GPUs (--tp), or --kv-cache-dtype fp8_e5m2",
                     "less room for activations / more hardware / KV precision", "SP-MEM-003"),
        TriageRemedy("flag", f"--context-length {bound} (or smaller), what the pool holds",
                     "longer requests are rejected at once instead", None),
    )
    context_reading = (
        f"The request ({groups.get('asked')} tokens) is longer than the model's context, "
        f"{bound} tokens, which bounds what SGLang accepts ({groups.get('max')})."
    )
    if pool_bound:
        rivals = () if decided else (("max_model_len", context_reading),)
        return "oom_kv_cache", pool_reading, pool_remedies + tuple(remedies), rivals
    rivals = () if decided else (("oom_kv_cache", pool_reading),)
    return "max_model_len", explanation, remedies, rivals



def ggml_tensor_role(groups, category, explanation, remedies, context=""):
    """Judge a ggml backend's refusal of an op by what the refused tensor is (triage/ggml_ops.py).

    The KV cache -> kv_cache_dtype, a weight of the model file -> quantization_support, float
    activations -> other; the row's category and explanation stand when the message names none
    of these. The remedies follow the judged category (ggml_ops.REMEDIES); a quantized KV cache
    seen in the log is a rival reading when the message names no tensor (ggml_ops.kv_rival); an
    op gap on a Mac GPU without SIMD-group features is the device's (ggml_ops.device_lacks).
    """
    from servepilot.triage.ggml_ops import REMEDIES, device_lacks, judge, kv_rival

    judged, reason = judge(groups, category)
    judged, device_reason = device_lacks(judged, context)
    reason = device_reason or reason
    fixes = tuple(TriageRemedy(*r) for r in REMEDIES.get(judged, ())) or remedies
    return judged, reason or explanation, fixes, kv_rival(groups, judged, context)


ANALYZERS = {
    "attention_reasons": attention_reasons,
    "sglang_input_limit": sglang_input_limit,
    "ggml_tensor_role": ggml_tensor_role,
}
