"""`servepilot plan [options] -- CMD`: per-GPU memory as the engine computes it.

Parse, one library call (plan_deployment), render: a table per GPU with a bar of its memory,
the budget's terms (exact or estimate, ±), the KV figures, and the same numbers for each KV
dtype option and each --tp asked about. Exit 1 when the plan predicts the launch will not
fit (weights over the GPU, or no room for one max_model_len request), else 0.
"""

from __future__ import annotations

from collections import Counter

import click

from servepilot.cli.common import (
    ENGINE_COMMAND_SETTINGS,
    JSON_OPTION,
    build_deployment_from_cli,
    multinode_options,
)

BAR_WIDTH = 40
# (part, character, rich style): weights, runtime (activations, non-torch, graphs, driver), KV, free.
BAR_PARTS = (("weights", "█", "cyan"), ("runtime", "▓", "yellow"), ("kv", "▒", "green"), ("free", "░", "bright_black"))


def _tp_sizes(values: tuple[str, ...]) -> tuple[int, ...]:
    """--tp 4 --tp 8 or --tp 4,8."""
    out: list[int] = []
    for v in values:
        for part in str(v).split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isdigit() or int(part) < 1:
                raise click.BadParameter(f"{part!r} is not a positive whole number", param_hint="--tp")
            out.append(int(part))
    return tuple(dict.fromkeys(out))


@click.command("plan", context_settings=ENGINE_COMMAND_SETTINGS)
@multinode_options
@click.option("--tp", "tp_sizes", multiple=True, metavar="N[,N...]",
              help="Also plan these tensor-parallel sizes (--tp 4 --tp 8, or --tp 4,8).")
@JSON_OPTION
def plan(command, gpu, engine_version, command_file, nodes, ray_address, tp_sizes, as_json) -> int:
    """Per-GPU memory as the engine computes it: weights, runtime, KV budget, KV tokens.

    \b
    Example:
      servepilot plan --gpu h200x8 -- vllm serve /models/deepseek-v3 -tp 8 --max-model-len 65536
    """
    from servepilot.multinode import is_multinode
    from servepilot.planning import plan_deployment
    from servepilot.runs.store import measurement_for

    if is_multinode(command_file, nodes, ray_address):  # per-node stages, layers and experts
        from servepilot.cli.multinode_views import plan_set

        return plan_set(command, command_file, nodes, ray_address, gpu, engine_version, as_json)
    dep = build_deployment_from_cli(command, gpu, engine_version, command_file)
    result = plan_deployment(dep, tp_options=_tp_sizes(tp_sizes), measured=measurement_for(dep))
    if as_json:
        from servepilot.cli.output import emit_json

        emit_json(result.JSON_SCHEMA, result.to_json())
    else:
        render_text(result)
    return 0 if result.ok else 1


def bar(row, width: int = BAR_WIDTH) -> list[tuple[str, str]]:
    """(text, style) segments of one GPU's memory bar; every part that is there shows at least one cell."""
    total = max(1, row.total_bytes)
    sizes = {"weights": row.weights_bytes, "runtime": row.runtime_bytes, "kv": row.kv_bytes,
             "free": max(0, row.free_bytes)}
    cells = {k: (max(1, round(v / total * width)) if v > 0 else 0) for k, v in sizes.items()}
    over = sum(cells.values()) - width
    # Trim the rounding overshoot from the largest part (never below one cell).
    while over > 0:
        k = max(cells, key=cells.get)
        if cells[k] <= 1:
            break
        cells[k] -= 1
        over -= 1
    return [(ch * cells[name], style) for name, ch, style in BAR_PARTS if cells[name]]


def _gib(n) -> str:
    return "?" if n is None else f"{n / (1 << 30):,.2f}"


def render_text(result) -> None:
    from rich.table import Table
    from rich.text import Text

    from servepilot.cli.output import console, human_bytes

    out = console()
    par = (f"TP {result.tp}" + (f" × PP {result.pp}" if result.pp > 1 else "")
           + (f" × DP {result.dp}" if result.dp > 1 else ""))
    if result.expert_parallel:
        par += " (EP)"
    version = result.engine_version + (" (assumed)" if result.version_assumed else "")
    gpus = f"{result.gpu_count} × {result.gpu} ({human_bytes(result.gpu_total_bytes)})"
    kinds = Counter((r.name, r.total_bytes) for r in result.rows)  # in CUDA order, one row a GPU
    if len(kinds) > 1:  # a box of different GPUs: name each kind with its count
        gpus = " + ".join(f"{n} × {name} ({human_bytes(total)})" for (name, total), n in kinds.items())
    out.print(Text.assemble((result.model, "bold"),
                            f" on {gpus} · {result.engine} {version} · {par}"))
    out.print(
        f"KV cache {result.kv_cache_dtype} · block {result.block_size} · max_model_len {result.max_model_len:,}"
        + (f" · gpu_memory_utilization {result.gpu_memory_utilization:g}" if result.gpu_memory_utilization else "")
    )

    # The bar takes what the seven figures leave of the terminal (they need about 62 columns).
    width = max(10, min(BAR_WIDTH, out.width - 62))
    gpus = Table(title="Per GPU (GiB)", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("GPU", "rank", "total", "weights", "runtime", "KV cache", "free"):
        gpus.add_column(col, justify="right" if col not in ("GPU", "rank") else "left", no_wrap=True)
    gpus.add_column("memory", no_wrap=True, overflow="crop")
    for r in result.rows:
        rank = (f"tp{r.tp_rank}" + (f" pp{r.pp_rank}" if result.pp > 1 else "")
                + (f" dp{r.dp_rank}" if result.dp > 1 else ""))
        free = Text(_gib(r.free_bytes), style="red" if r.free_bytes < 0 else "")
        gpus.add_row(str(r.index), rank, _gib(r.total_bytes), _gib(r.weights_bytes), _gib(r.runtime_bytes),
                     _gib(r.kv_bytes), free, Text.assemble(*bar(r, width)))
    out.print(gpus)
    out.print(Text.assemble(*[(f"{ch} {name}  ", style) for name, ch, style in BAR_PARTS]))

    terms = Table(title="Budget of one GPU", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("term", "GiB", "", "±GiB", "in KV budget", "how"):
        terms.add_column(col, justify="right" if col in ("GiB", "±GiB") else "left", overflow="fold")
    for t in result.terms:
        kind = Text("exact", style="green") if t.exact else Text("estimate", style="yellow")
        terms.add_row(t.name, _gib(t.bytes), kind, _gib(t.uncertainty_bytes) if t.uncertainty_bytes else "",
                      "yes" if t.subtracted else "no", t.basis)
    out.print(terms)

    verdict = Text("fits", style="bold green") if result.ok else Text("does not fit", style="bold red")
    lines = [
        f"KV per token per GPU: {result.bytes_per_token:,} B ({result.bytes_per_token_per_layer:,} B × layers)",
        f"KV budget: {_gib(result.available_kv_bytes)} GiB ({'exact' if result.available_exact else 'estimate'}) → "
        f"{result.num_blocks:,} blocks → {result.kv_tokens:,} tokens",
        f"max concurrency at {result.max_model_len:,} tokens: {result.max_concurrency:.2f}x · "
        f"longest single request: {result.longest_context:,} tokens",
    ]
    if result.load_peak_bytes is not None:
        lines.append(f"weights while loading: {_gib(result.load_peak_bytes)} GiB per GPU at the "
                     f"peak ({result.load_peak_basis})")
    for line in lines:
        out.print(line)
    tail = ""
    if result.load_fits is False:  # the planner's verdict, stage by stage
        tail = " — loading needs more memory than the GPU has"
    elif not result.weights_fit:
        tail = " — the weights and runtime leave no KV budget"
    elif not result.fits and result.max_model_len_fit is not None:
        tail = f" — the engine will suggest max_model_len {result.max_model_len_fit:,}"
    out.print(Text.assemble("verdict: ", verdict, tail))

    if result.alternatives:
        alts = Table(title="Options", title_justify="left", show_edge=False, pad_edge=False)
        for col in ("KV dtype", "TP", "B/token", "weights GiB", "KV GiB", "KV tokens", "concurrency", "fits",
                    "longest"):
            alts.add_column(col, justify="left" if col in ("KV dtype", "fits") else "right",
                            no_wrap=col != "KV dtype")
        for a in result.alternatives:
            ok = a.fits and a.weights_fit
            alts.add_row(a.kv_cache_dtype + (" *" if a.current else ""), str(a.tp), f"{a.bytes_per_token:,}",
                         _gib(a.weights_per_gpu), _gib(a.available_kv_bytes), f"{a.kv_tokens:,}",
                         f"{a.max_concurrency:.2f}x", Text("yes" if ok else "no", style="green" if ok else "red"),
                         f"{a.longest_context:,}")
        out.print(alts)
    if result.measured:
        out.print(f"[green]measured[/green]: figures from run {result.measured.get('run_id')} are used")
    for note in result.notes:
        out.print(f"[dim]note: {note}[/dim]")
