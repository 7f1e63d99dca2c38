"""SGLang's memory defaults: mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs.

The rules are rows of knowledge/memory.yaml; this module only evaluates them the way each
release's ServerArgs does, for a GPU of `mem_mib` (what nvidia-smi reports) and the parallel
sizes. Cases SGLang adjusts further (speculative decoding, DP attention, vision towers,
piecewise CUDA graphs switched off) are returned with a note instead of a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from servepilot.engines import knowledge as kb

ENGINE = "sglang"


@dataclass(frozen=True)
class MemoryDefaults:
    mem_fraction_static: float | None
    chunked_prefill_size: int | None
    cuda_graph_max_bs: int | None
    source: str
    notes: tuple[str, ...] = ()


def defaults(version: str, mem_mib: int, *, tp: int = 1, pp: int = 1, use_mla: bool = False,
             arch: str | None = None, sparse: bool = False) -> MemoryDefaults | None:
    """What SGLang `version` sets when none of the three flags is given; None when the
    release line was not read."""
    data = kb.load_file(ENGINE, "memory")
    frac_row = kb.row_for(data["mem_fraction_static"], version)
    size_row = kb.row_for(data["size_defaults"], version)
    if frac_row is None or size_row is None:
        return None
    chunked, graph_bs = _sizes(size_row["tiers"], mem_mib, tp)
    notes: list[str] = []
    kind = frac_row["kind"]
    if kind == "tp_table":
        # before 0.4.6 SGLang had no pipeline parallelism: the table is indexed by tp alone
        fraction = _tp_table(frac_row, mem_mib, tp if frac_row.get("parallel") == "tp" else tp * pp)
    elif kind == "reserved_by_memory":
        fraction = _reserved_by_memory(frac_row["tiers"], mem_mib, tp * pp)
    else:
        # no row: piecewise CUDA graphs were off by default in that release (nothing reserved)
        pieces = kb.row_for(data["piecewise_capture_sizes"], version)
        piecewise = pieces is not None and pp == 1 and not sparse \
            and arch not in (pieces["disabled_archs"] or ())
        fraction = _reserved_from_sizes(frac_row, pieces, mem_mib, tp, pp, chunked, graph_bs,
                                        use_mla, piecewise)
    source = frac_row.source if frac_row.source == size_row.source else f"{frac_row.source}; {size_row.source}"
    return MemoryDefaults(fraction, chunked, graph_bs, source, tuple(notes))


def _sizes(tiers, mem_mib: int, tp: int) -> tuple[int | None, int | None]:
    for below, chunked, small_tp_bs, large_tp_bs in tiers:
        if below is None or mem_mib < below:
            return chunked, small_tp_bs if tp < 4 else large_tp_bs
    raise AssertionError("memory tiers end with an unbounded row")


def _tp_table(row, mem_mib: int, parallel: int) -> float:
    small_max = row.get("small_gpu_max_mib")
    if small_max is None or mem_mib <= small_max:
        fraction = next(f for size, f in row["table"] if parallel >= size)
    elif row.get("large_reserved_mib") is not None:
        # 0.4.5: all but a fixed amount of the GPU, not rounded
        fraction = (mem_mib - row["large_reserved_mib"]) / mem_mib
    else:
        fraction = float(row["large_fraction"])
    raise_above = row.get("raise_above_mib")
    if raise_above is not None and mem_mib > raise_above:
        # 48 GiB of the headroom back, but never more than all but 18 GiB of the GPU
        fraction = min(fraction + 48 * 1024 * (1 - fraction) / mem_mib,
                       (mem_mib - 1024 * 18) / mem_mib)
    return fraction


def _reserved_by_memory(tiers, mem_mib: int, parallel: int) -> float:
    for below, base, per_parallel in tiers:
        if below is None or mem_mib < below:
            reserved = (base + parallel * per_parallel) * 1024
            return round((mem_mib - reserved) / mem_mib, 3)
    raise AssertionError("memory tiers end with an unbounded row")


def capture_sizes(pieces, max_tokens: int) -> list[int]:
    sizes = []
    for start, stop, step in pieces["ranges"]:
        sizes.extend(range(start, (max_tokens if stop is None else stop) + 1, step))
    return [s for s in sizes if s <= max_tokens]


def _reserved_from_sizes(row, pieces, mem_mib, tp, pp, chunked, graph_bs, use_mla,
                         piecewise) -> float:
    reserved = row["base_mib"] + max(chunked, 2048) * row["per_prefill_token_mib"]
    reserved += graph_bs * row["per_graph_bs_mib"] + tp * pp * row["per_parallel_mib"]
    if piecewise:
        if use_mla:
            reserved += row["piecewise_mla_mib"]
        else:
            reserved += len(capture_sizes(pieces, chunked)) * row["piecewise_mha_mib_per_size"]
    if mem_mib > row["floor_above_mib"]:
        reserved = max(reserved, row["floor_mib"])
    return round((mem_mib - reserved) / mem_mib, 3)
