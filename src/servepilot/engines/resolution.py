"""Resolution: what an engine will pick for one Deployment (shared by every engine's resolve).

Frozen facts with their sources, computed once by `engines.<engine>.resolve.resolve(dep)`.
Rules in `servepilot.checks` read it; they never re-derive engine behaviour themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Evidence:
    """One fact a resolution or a finding rests on, with where it came from (file@tag in the
    engine's repository, a PR URL, or a path). checks.finding re-exports it."""

    fact: str  # "config.json quantization_config.kv_cache_scheme = {num_bits: 8, type: float}"
    source: str  # "examples/kimi/config.json" or "vllm/platforms/cuda.py@v0.16.0" or a PR URL


# The name this class had before it was shared with checks.finding (branches written against
# it keep working until they are merged; new code says Evidence).
Fact = Evidence


@dataclass(frozen=True)
class Candidate:
    """One attention backend the engine tried, and why it was rejected (empty: valid)."""

    backend: str
    reasons: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.reasons


@dataclass(frozen=True)
class QuantKernels:
    """The quantization method the engine runs and the kernels it will use on this GPU."""

    method: str  # the engine's method name: "modelopt_fp4", "fp8", "awq_marlin", ...
    min_cc: int | None = None  # below it the engine refuses to start
    native_min_cc: int | None = None
    linear: str | None = None  # "native" kernel description or the fallback's
    moe: str | None = None
    fallback: bool = False  # weight-only Marlin instead of the native low-precision GEMM
    supported: bool = True
    error: str | None = None  # the engine's message when not supported
    source: str = ""
    # with a fallback: the first later release whose kernels for the method are native on
    # this GPU (mxfp4 on Hopper: 0.12.0), None when no release read has them
    native_from: str | None = None


@dataclass(frozen=True)
class ReleaseFacts:
    """What the engine release itself carries, beyond its choices for this deployment, as the
    typed knowledge rows that hold for it (engines/<engine>/release.py fills this in): rules
    read these instead of the fact files. Rows are engines.knowledge.KnowledgeRow records.

    `version` is the release as the operator gave it (rules about old releases judge that one,
    not the resolver's, which clamps old releases to the oldest one read)."""

    version: str | None = None
    build_archs: tuple | None = None  # (archs, source, "vLLM 0.16.0's wheel") of the build that runs
    wheel: object = None  # the builds row of this release (vLLM: reported_missing, reported_source)
    wheels: tuple = ()  # every builds row, oldest range first (for an upgrade that covers a GPU)
    gpu_flags: tuple = ()  # options that need a GPU generation, for the resolved release
    backend_forcing: object = None  # how the resolved release takes a forced attention backend
    logits_soft_cap: object = None  # which backend soft-capped attention needs (old releases)
    v1_fp8_kv_cache: object = None  # FP8 KV cache on the V1 engine (0.7-0.9)
    quant_speed: object = None  # native low-precision GEMM speed-ups over 16-bit (hardware ratios)
    architecture: tuple | None = None  # (status, first release) of the model's first architecture
    config_types: frozenset = frozenset()  # model_types the engine and transformers have configs for
    bnb_prequant_tp: object = None  # a pre-quantized bitsandbytes checkpoint refused with tensor parallel
    flashinfer_v0_fa2: object = None  # the V0 FlashInfer backend's profiling pass runs FlashAttention-2


@dataclass(frozen=True)
class Resolution:
    engine: str
    engine_version: str | None
    gpu_cc: tuple[int, int] | None
    kv_cache_dtype: str | None  # the resolved --kv-cache-dtype string ("fp8_e4m3", "auto", ...)
    kv_cache_storage: str | None  # what is stored: "bfloat16", "fp8_e4m3", ...
    kv_requested: str | None  # what the operator typed (or the default "auto")
    kv_evidence: tuple[Evidence, ...] = ()
    kv_valid: bool = True  # the value is one the engine version accepts
    kv_valid_values: tuple[str, ...] = ()
    use_mla: bool = False
    use_sparse: bool = False
    has_sink: bool = False
    head_size: int | None = None
    model_dtype: str | None = None
    attention_backend: str | None = None
    candidates: tuple[Candidate, ...] = ()
    forced_backend: str | None = None
    forced_by: str | None = None  # "--attention-backend", "VLLM_ATTENTION_BACKEND", ...
    selection_error: str | None = None  # the engine's own error text, when it will raise
    selection_mode: str | None = None  # "validated" | "legacy"
    block_size: int | None = None
    quant: QuantKernels | None = None
    non_mla_kv_forced: str | None = None  # compressed-tensors: non-MLA layers' forced dtype
    facts: tuple[Evidence, ...] = ()  # the knowledge rows used, with sources
    notes: tuple[str, ...] = ()  # what could not be known, in words
    extra: dict = field(default_factory=dict)
    release: ReleaseFacts = field(default_factory=ReleaseFacts)  # set by EngineRecord.resolve

    @property
    def fails(self) -> bool:
        return self.selection_error is not None

    def summary(self) -> dict:
        """The `resolved` block of `check --json`."""
        out = {
            "engine": self.engine,
            "engine_version": self.engine_version,
            "compute_capability": f"{self.gpu_cc[0]}.{self.gpu_cc[1]}" if self.gpu_cc else None,
            "kv_cache_dtype": self.kv_cache_dtype,
            "kv_cache_storage": self.kv_cache_storage,
            "attention_backend": self.attention_backend,
            "forced_backend": self.forced_backend,
            "block_size": self.block_size,
            "use_mla": self.use_mla,
            "head_size": self.head_size,
            "model_dtype": self.model_dtype,
            "candidates": [{"backend": c.backend, "reasons": list(c.reasons)} for c in self.candidates],
        }
        if self.quant is not None:
            out["quantization"] = self.quant.method
            out["quant_kernels"] = {"linear": self.quant.linear, "moe": self.quant.moe, "fallback": self.quant.fallback}
        if self.non_mla_kv_forced:
            out["non_mla_kv_cache_dtype"] = self.non_mla_kv_forced
        return out
