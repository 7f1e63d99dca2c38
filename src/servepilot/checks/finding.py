"""Finding, Evidence and Remedy: the contract of DESIGN.md for check (and triage) output."""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.categories import REMEDY_KINDS, check_category
from servepilot.engines.resolution import Evidence  # one class for a fact and its source

__all__ = ["Evidence", "Finding", "Remedy", "REMEDY_KINDS", "SEVERITIES"]

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Remedy:
    """One way out, ranked by its position in Finding.remedies."""

    kind: str  # one of REMEDY_KINDS
    change: str  # the concrete change: "--kv-cache-dtype bfloat16", "pip install 'vllm>=0.18.0'"
    tradeoff: str  # "KV cache doubles: 35,136 → 70,272 B/token per GPU; 48% fewer tokens"
    args: dict | None = None  # machine-usable form for `fix`: {"set": {...}, "unset": [...]}, overlay patch...

    def __post_init__(self):
        if self.kind not in REMEDY_KINDS:
            raise ValueError(f"unknown remedy kind {self.kind!r}")


@dataclass(frozen=True)
class Finding:
    code: str  # stable, e.g. "SP-ATTN-001"
    category: str
    severity: str
    title: str
    detail: str
    evidence: tuple[Evidence, ...] = ()
    remedies: tuple[Remedy, ...] = ()

    def __post_init__(self):
        check_category(self.category)
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
