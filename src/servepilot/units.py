"""Byte units and their human forms: one place for GiB and for "1.50 GiB"-style text.

Binary units throughout, because engines log and size memory in them (vLLM's "Model loading
took 14.99 GiB"; SGLang's "GB" are GiB too: get_available_gpu_memory divides by 1 << 30).
Library layers import from here; the CLI re-exports `human_bytes` from cli/output.py.
"""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

# Unit words as engines print them -> bytes. "GB" is decimal where an engine means it so.
UNIT_BYTES = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "GB": 10**9}


def human_bytes(n: int | float | None) -> str:
    """1.50 GiB style, binary units, as engines log memory ("?" for unknown)."""
    if n is None:
        return "?"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def gib(n: int | float | None, unit: bool = True) -> str:
    """Always in GiB, with thousands separators: "1,234.56 GiB" (or "1,234.56" for a GiB
    column); "?" for unknown. For tables and budgets where every figure shares one unit."""
    if n is None:
        return "?"
    text = f"{n / GiB:,.2f}"
    return f"{text} GiB" if unit else text
