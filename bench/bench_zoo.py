"""The model zoo: every real config.json in bench/zoo against its published parameter count.

Each bench/zoo/<org>--<name>/ holds the model's config.json (plus hf_quant_config.json where
the checkpoint has one) and source.json: the huggingface.co URL, where the copy came from, the
release month, and the published total / active parameter counts with their source (model
card or the model page's safetensors count). Nothing in the zoo is invented or fitted.

Per model it prints: parameters counted by servepilot (checkpoint/estimate.py, the count
inspect, check and plan share) against the published figure, the layer kinds, the KV cache
bytes per token (BF16, one GPU) and the Mamba / linear-attention state per sequence, the
quantization, and anything servepilot could not establish. Then the issue 12 targets:
total parameters within 3% for at least 95% of the zoo, none off by more than 10% without
an `unknown` that says why.

    python bench/bench_zoo.py [--verbose]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ZOO = Path(__file__).resolve().parent / "zoo"


def models() -> list[Path]:
    return sorted(p for p in ZOO.iterdir() if (p / "config.json").is_file())


def measure(root: Path) -> dict:
    from servepilot.checkpoint.estimate import estimate_params
    from servepilot.checkpoint.inspect import inspect_path
    from servepilot.checkpoint.summary import model_summary
    from servepilot.errors import ServepilotError
    from servepilot.planning import kv

    source = json.loads((root / "source.json").read_text())
    out = {"name": root.name, "published": source["published"], "released": source["released"]}
    try:
        spec = inspect_path(root)
    except ServepilotError as exc:
        return out | {"error": exc.one_line(), "unknown": [exc.one_line()]}
    est = estimate_params(spec)
    summary = model_summary(spec)
    out.update(
        params=est.total if est else None,
        active=summary["active_parameters"],
        kinds=summary["layer_kinds"],
        quant=summary["quantization"],
        unknown=list(spec.unknown),
    )
    try:
        out["kv"] = kv.kv_bytes_per_token(spec, 1, "bfloat16")
        out["state"] = kv.state_bytes_per_sequence(spec, 1, "bfloat16")
    except ServepilotError as exc:
        out["kv"], out["state"] = None, None
        out["unknown"].append(exc.one_line())
    return out


def main(argv: list[str]) -> int:
    verbose = "--verbose" in argv
    rows = [measure(p) for p in models()]
    within3 = off10 = off10_unexplained = 0
    print(
        f"{'model':<52} {'params':>9} {'published':>9} {'diff':>7}  {'active':>7} {'pub':>6}  "
        f"{'KV B/tok':>9} {'state B/seq':>11}  layer kinds / quantization"
    )
    for r in rows:
        pub = r["published"]["total_b"] * 1e9
        p = r.get("params")
        diff = (p - pub) / pub if p else None
        if diff is not None and abs(diff) <= 0.03:
            within3 += 1
        if diff is None or abs(diff) > 0.10:
            off10 += 1
            if not r.get("unknown"):
                off10_unexplained += 1
        active = f"{r['active'] / 1e9:7.2f}" if r.get("active") else "      -"
        pub_active = r["published"]["active_b"]
        kinds = ", ".join(f"{n} {k}" for k, n in (r.get("kinds") or {}).items())
        print(
            f"{r['name'][:52]:<52} {(p or 0) / 1e9:9.2f} {pub / 1e9:9.2f} "
            f"{(f'{diff:+.1%}' if diff is not None else '?'):>7}  {active} "
            f"{(f'{pub_active:6.1f}' if pub_active else '     -')}  "
            f"{(r.get('kv') if r.get('kv') is not None else '?'):>9} {(r.get('state') or 0):>11}  "
            f"{kinds}{' · ' + r['quant'] if r.get('quant') else ''}"
        )
        if r.get("unknown") and (verbose or diff is None or abs(diff) > 0.10):
            for u in r["unknown"]:
                print(f"{'':<52} unknown: {u}")
    n = len(rows)
    families = Counter(r["name"].split("--")[0] for r in rows)
    years = Counter(r["released"][:4] for r in rows)
    print()
    print(
        f"zoo: {n} real config.json files from {len(families)} organisations; released "
        + ", ".join(f"{y}: {c}" for y, c in sorted(years.items()))
    )
    print(
        f"total parameters within 3% of the published figure: {within3}/{n} "
        f"({within3 / n:.1%}; target >= 95%)"
    )
    print(
        f"off by more than 10% (or not counted): {off10}, of which without an unknown saying why: "
        f"{off10_unexplained} (target 0)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
