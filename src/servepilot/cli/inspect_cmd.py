"""`servepilot inspect PATH`: parse, one library call, render (text or --json)."""

from __future__ import annotations

import click

from servepilot.cli.common import JSON_OPTION

SCHEMA = "servepilot.inspect/1"
EXIT_DAMAGED = 2  # DESIGN.md: bad input; the report is still printed, the damage listed


@click.command("inspect")
@click.argument("path")
@click.option("--revision", metavar="REV", help="Branch, tag or commit of a Hub model id (default main).")
@JSON_OPTION
def inspect(path: str, revision: str | None, as_json: bool) -> int:
    """Read a checkpoint's headers into a model spec (never the weights).

    PATH is a checkpoint directory, one .safetensors or .gguf file, a config.json, or a
    Hugging Face model id (org/name): from the local cache when it is there, else from the
    Hub by its small files and the safetensors/GGUF headers alone (HTTP range reads, no
    weights; HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE are honoured; headers are kept by
    commit, so a repeat makes no request). Exit 2 when the path cannot be read, or when
    some shards are damaged or missing (the rest is still shown).

    \b
    Examples:
      servepilot inspect /models/kimi-k2.5-nvfp4
      servepilot inspect --json /models/Qwen3-8B-Q4_K_M.gguf
      servepilot inspect meta-llama/Llama-3.1-8B
      servepilot inspect nvidia/Kimi-K2.5-NVFP4 --revision main
    """
    from servepilot.checkpoint.inspect import inspect_path

    spec = inspect_path(path, revision=revision)
    if as_json:
        from servepilot.checkpoint.remote import view_of
        from servepilot.checkpoint.summary import model_summary
        from servepilot.cli.output import emit_json

        payload: dict = {"model": spec, "model_summary": model_summary(spec)}
        view = view_of(spec.path)
        if view is not None:
            payload["remote"] = view.to_json()
        emit_json(SCHEMA, payload)
    else:
        render_text(spec)
    return EXIT_DAMAGED if spec.problems else 0


def _n(v) -> str:
    return f"{v:,}" if isinstance(v, int) else "?"


def _count(n: int) -> str:
    """582.48 B, 1.09 T, 161.3 K: element and parameter counts."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:,.2f} {unit}"
    return str(n)


def _size(n: int | None) -> str:
    from servepilot.cli.output import human_bytes

    if n is None:
        return "?"
    return f"{human_bytes(n)} ({n / 1e9:,.1f} GB)" if n >= 1e9 else human_bytes(n)


def text_rows(spec) -> list[tuple[str, str]]:
    """(label, line) pairs: the whole report, short enough to read in ten seconds."""
    rows: list[tuple[str, str]] = []
    model = " · ".join(spec.architectures) or "?"
    types = spec.model_type or "?"
    if spec.text_model_type:
        types += f" → text {spec.text_model_type}"
    rows.append(("model", f"{model} · {types} · family {spec.family or 'unknown'}"))

    a = spec.attention
    if a is not None:
        parts = [a.kind.upper(), f"{a.num_layers} layers", f"{a.num_heads} heads"]
        if a.kind == "mla":
            parts.append(f"kv_lora_rank {a.kv_lora_rank} · q_lora_rank {a.q_lora_rank}")
            parts.append(f"rope {a.qk_rope_head_dim} + nope {a.qk_nope_head_dim} · v {a.v_head_dim}")
            if a.mla_head_size:
                parts.append(f"latent {a.mla_head_size}/token/layer")
            if a.sparse:
                parts.append(f"sparse (index_topk {a.index_topk})")
        else:
            parts.append(f"{a.num_kv_heads} KV heads · head_dim {a.head_dim}")
        if a.sliding_window and a.num_sliding_layers:
            parts.append(f"{a.num_sliding_layers} sliding (window {a.sliding_window}) + {a.num_full_layers} full")
        rows.append(("attention", " · ".join(parts)))
    rows.extend(_layer_rows(spec))
    m = spec.moe
    if m is not None and m.num_experts:
        line = f"{m.num_experts} routed + {m.num_shared_experts} shared · {m.experts_per_token} per token"
        if m.first_dense_layers:
            line += f" · first {m.first_dense_layers} dense"
        if m.expert_intermediate_size:
            line += f" · expert intermediate {m.expert_intermediate_size}"
        rows.append(("moe", line))
    if spec.mtp_layers:
        rows.append(("mtp", f"{spec.mtp_layers} next-token prediction layer(s)"))
    rows.append(("sizes", f"hidden {_n(spec.hidden_size)} · vocab {_n(spec.vocab_size)} · "
                          f"max positions {_n(spec.max_position_embeddings)} · dtype {spec.dtype or '?'}"))

    q = spec.quant
    if q is None:
        rows.append(("quant", "none declared"))
    else:
        parts = [f"{q.method} {q.quant_algo or ''}".strip()]
        if q.bits:
            parts.append(f"{q.bits}-bit")
        if q.group_size:
            parts.append(f"group {q.group_size}")
        if q.weight_block_size:
            parts.append("block " + "x".join(str(b) for b in q.weight_block_size))
        if q.ignore:
            parts.append(f"{len(q.ignore)} modules kept unquantized")
        if q.producer:
            parts.append(q.producer)
        where = f"engine reads {q.declared_in}"
        others = [d.where for d in q.declarations if d.where != q.declared_in]
        if others:
            where += f" (also declared in {', '.join(others)})"
        rows.append(("quant", " · ".join(parts) + " · " + where))
    kv = spec.kv_cache
    rows.append(("kv cache", f"{kv.dtype} declared in {kv.where}" if kv else "no dtype declared (engine default)"))

    code = spec.custom_code
    if code is not None:
        files = []
        for f in code.files:
            mark = f"sha256 {f.sha256[:12]}" if f.sha256 else ("present" if f.present else "MISSING")
            files.append(f"{f.name} ({mark})")
        rows.append(("custom code", "needs --trust-remote-code: " + ", ".join(files)))

    w = spec.weights
    if w is not None:
        if w.source == "safetensors":
            line = f"{_size(w.total_bytes)} in {w.shards} shard(s), from safetensors headers"
        elif w.source == "gguf":
            line = f"{_size(w.total_bytes)} in {w.shards} file(s), from GGUF headers"
        elif w.source == "index":
            line = f"{_size(w.total_bytes)} from the index total_size ({w.shards} shards named, none present)"
        else:
            line = f"~{_size(w.total_bytes)} ESTIMATED from the architecture"
        if w.total_params:
            line += f" · {_count(w.total_params)} " + ("parameters" if w.estimated else "elements as stored")
        rows.append(("weights", line))
        if w.params_by_dtype:
            rows.append(("", " · ".join(f"{k} {_count(v)}" for k, v in list(w.params_by_dtype.items())[:6])))
    g = spec.gguf
    if g is not None:
        line = f"{g.architecture or '?'} · {g.file_type or '?'} · context {_n(g.context_length)} · " \
               f"{_n(g.block_count)} blocks · {_n(g.head_count)}/{_n(g.head_count_kv)} heads/KV heads"
        if g.split_files:
            line += f" · {len(g.split_files)} split files"
        rows.append(("gguf", line))
        rows.append(("", "tensor types: " + ", ".join(f"{k} x{v}" for k, v in list(g.tensor_types.items())[:8])))
    for note in spec.notes:
        rows.append(("note", note))
    for item in spec.unknown:
        rows.append(("unknown", item))
    for problem in spec.problems:
        rows.append(("PROBLEM", problem))
    return rows


def _layer_rows(spec) -> list[tuple[str, str]]:
    """The layer kinds and, for hybrids, the state a sequence holds (the figures plan uses)."""
    from servepilot.checkpoint.summary import model_summary

    kinds = model_summary(spec)["layer_kinds"]
    if not kinds or set(kinds) <= {"full", "full+moe"}:
        return []
    rows = [("layers", " · ".join(f"{n} {k}" for k, n in kinds.items()))]
    if any("mamba" in k or "linear" in k for k in kinds):
        from servepilot.planning.kv import state_bytes_per_sequence

        rows.append(("state", f"{_size(state_bytes_per_sequence(spec))} per sequence "
                              "(Mamba / linear attention, one GPU, no KV cache in these layers)"))
    return rows


def display_name(spec) -> str:
    """The checkpoint's name; for a Hugging Face cache snapshot, org/name@commit."""
    from pathlib import Path

    from servepilot.checkpoint.remote import view_of

    view = view_of(spec.path)
    if view is not None:
        return f"{view.repo_id}@{view.commit[:12]} (Hub headers only)"
    p = Path(spec.path)
    if p.parent.name == "snapshots" and p.parent.parent.name.startswith("models--"):
        return p.parent.parent.name[len("models--"):].replace("--", "/", 1) + "@" + p.name[:12]
    return p.resolve().name or spec.path


def render_text(spec) -> None:
    from rich.markup import escape

    from servepilot.cli.output import print_rows

    title = f"[bold]{escape(display_name(spec))}[/]  {escape(spec.path)}  [dim]({spec.format})[/]"
    print_rows(text_rows(spec), styles={"PROBLEM": "bold red", "unknown": "yellow", "note": "cyan"}, title=title)
