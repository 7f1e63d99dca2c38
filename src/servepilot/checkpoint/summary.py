"""The model in a few figures: the one summary inspect, check and plan all print.

Each figure comes from its one owner (estimate.py for parameters, the layer list for layer
kinds, quant.py for quantization), so the three verbs cannot disagree about them.
"""

from __future__ import annotations

from collections import Counter

from servepilot.checkpoint.spec import ModelSpec


def model_summary(spec: ModelSpec | None) -> dict:
    """{"parameters", "parameters_from", "active_parameters", "mtp_parameters", "layer_kinds",
    "quantization", "kv_cache_declared"}; figures not known are None."""
    if spec is None:
        return {}
    from servepilot.checkpoint.estimate import estimate_params, model_layers

    est = estimate_params(spec) if spec.format != "gguf" else None
    w = spec.weights
    if w is not None and w.source in ("safetensors", "gguf") and w.total_params and not w.damaged:
        params, source = w.total_params, f"{w.source} headers"
    elif est is not None:
        params, source = est.total, "architecture (config.json)"
    else:
        params, source = None, None
    q = spec.quant
    quant = None
    if q is not None:
        quant = f"{q.method} {q.quant_algo}" if q.quant_algo else q.method
    kinds = Counter(ly.kind for ly in model_layers(spec))
    return {
        "parameters": params,
        "parameters_from": source,
        "active_parameters": est.active if est is not None and spec.is_moe else None,
        "mtp_parameters": est.mtp if est is not None and est.mtp else None,
        "layer_kinds": dict(sorted(kinds.items())),
        "quantization": quant,
        "kv_cache_declared": spec.kv_cache.dtype if spec.kv_cache is not None else None,
    }
