"""What a plan is: per-GPU rows, budget terms, alternatives, and the MemoryPlan itself."""

from __future__ import annotations

from dataclasses import dataclass, field

from servepilot.planning.budget import Term

__all__ = ["Alternative", "GpuRow", "MemoryPlan", "Term"]


@dataclass(frozen=True)
class GpuRow:
    """One GPU: where its memory goes."""

    index: int
    name: str
    pp_rank: int
    tp_rank: int
    dp_rank: int
    total_bytes: int
    weights_bytes: int
    runtime_bytes: int  # activation peak + non-torch + CUDA graphs + driver-reserved
    kv_bytes: int  # the KV cache the engine allocates (blocks × page × layers)
    free_bytes: int  # what is left (negative: over the GPU)


@dataclass(frozen=True)
class Alternative:
    """The same command with another KV dtype or TP size."""

    kv_cache_dtype: str
    tp: int
    bytes_per_token: int
    weights_per_gpu: int
    available_kv_bytes: int
    kv_tokens: int
    max_concurrency: float
    fits: bool
    weights_fit: bool
    max_model_len_fit: int | None
    longest_context: int
    current: bool = False


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory as the engine computes it, with every term marked exact or estimate."""

    engine: str
    engine_version: str
    version_assumed: bool
    generation: str  # vLLM "v0" | "v1"; "sglang"; "llama.cpp"
    model: str
    gpu: str
    gpu_count: int
    gpu_total_bytes: int
    tp: int
    pp: int
    dp: int
    expert_parallel: bool
    kv_cache_dtype: str
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int | None
    max_num_seqs: int | None
    gpu_memory_utilization: float | None
    bytes_per_token_per_layer: int
    bytes_per_token: int  # per GPU, every attention layer
    page_size_bytes: int
    weights_source: str
    weights_exact: bool
    terms: tuple[Term, ...]
    requested_bytes: int | None
    available_kv_bytes: int
    available_exact: bool
    num_blocks: int
    kv_tokens: int
    max_concurrency: float
    fits: bool  # one max_model_len request fits in the KV cache
    weights_fit: bool  # the weights (and runtime) fit under the engine's memory limit
    max_model_len_fit: int | None  # the engine's suggestion when `fits` is False
    longest_context: int
    kv_groups: int
    rows: tuple[GpuRow, ...]
    alternatives: tuple[Alternative, ...] = ()
    measured: dict | None = None
    notes: tuple[str, ...] = ()
    sources: tuple[str, ...] = field(default=())
    model_summary: dict = field(default_factory=dict)  # checkpoint/summary.py, as inspect prints it
    # weight memory per GPU at the peak of loading, where it differs from the resident weights
    # (vLLM's online FP8 quantization); None where loading holds just the weights
    load_peak_bytes: int | None = None
    load_peak_basis: str = ""
    # how loading peaks (online_fp8_load's mode: "full_16bit", "full_16bit_and_fp8",
    # "layerwise"); "" without a load peak
    load_peak_mode: str = ""
    # whether every pipeline stage's load peak stays below its own GPUs' CUDA total (None
    # without a load peak), and the first stage where it does not, with that stage's figures
    load_fits: bool | None = None
    load_over_stage: int | None = None
    load_over_stage_peak_bytes: int | None = None
    load_over_stage_cuda_bytes: int | None = None
    # Where the sampler warm-up depends on whether FlashInfer is installed and the deployment
    # does not say (vLLM 0.8 - 0.11 wheels): the KV budget had FlashInfer's sampler run
    # instead of the native sort the plan assumes; None when the install does not matter.
    available_kv_bytes_with_flashinfer_sampler: int | None = None

    @property
    def ok(self) -> bool:
        return self.fits and self.weights_fit

    JSON_SCHEMA = "servepilot.plan/1"

    def to_json(self) -> dict:
        """The JSON object of docs/json/plan.md (after "schema"): every field, `ok` and `summary`."""
        from servepilot.jsonable import to_jsonable

        body = to_jsonable(self)
        body["ok"] = self.ok
        body["summary"] = self.summary()
        return body

    def summary(self) -> dict:
        """The compact form `check --json` carries under "plan"."""
        return {
            "engine": self.engine,
            "engine_version": self.engine_version,
            "gpu": self.gpu,
            "gpu_total_bytes": self.gpu_total_bytes,
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "kv_cache_dtype": self.kv_cache_dtype,
            "block_size": self.block_size,
            "max_model_len": self.max_model_len,
            "weights_per_gpu_bytes": max((r.weights_bytes for r in self.rows), default=0),
            "weights_source": self.weights_source,
            "load_peak_bytes": self.load_peak_bytes,
            "load_fits": self.load_fits,
            "available_kv_bytes": self.available_kv_bytes,
            "available_exact": self.available_exact,
            "bytes_per_token": self.bytes_per_token,
            "kv_tokens": self.kv_tokens,
            "max_concurrency": round(self.max_concurrency, 2),
            "fits": self.fits,
            "weights_fit": self.weights_fit,
            "max_model_len_fit": self.max_model_len_fit,
            "longest_context": self.longest_context,
            "measured": self.measured is not None,
            "estimates": [t.name for t in self.terms if not t.exact],
        }
