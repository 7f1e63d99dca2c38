"""Quantization declarations → QuantSpec and the KV cache dtype the checkpoint asks for.

A checkpoint can declare quantization in up to three places; vLLM reads exactly one of them
(data/quant_sources.json, with sources): config.json's top-level quantization_config (or
compression_config), else hf_quant_config.json, else text_config's quantization_config.
Every declaration is kept in QuantSpec.declarations so a conflict is visible.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from servepilot.checkpoint.spec import KVCacheDeclaration, QuantDeclaration, QuantSpec

SOURCES = Path(__file__).with_name("data") / "quant_sources.json"

# Bits of the weights per modelopt quant_algo (NVIDIA TensorRT Model Optimizer export names).
MODELOPT_WEIGHT_BITS = {"NVFP4": 4, "FP8": 8, "MIXED_PRECISION": None, "FP8_PB_WO": 8, "W4A8_AWQ": 4, "W4A16_AWQ": 4,
                        "INT8_SQ": 8, "W4A8_NVFP4_FP8": 4, "MXFP8": 8, "NVFP4_AWQ": 4}
# modelopt NVFP4 scales one group of 16 weights with one FP8 scale (modelopt docs, NVFP4).
NVFP4_GROUP = 16
# OCP Microscaling spec v1.0: MX formats share one E8M0 scale per block of 32 elements.
MX_BLOCK = 32


@lru_cache(maxsize=1)
def kv_cache_keys() -> tuple[str, ...]:
    return tuple(json.loads(SOURCES.read_text())["kv_cache_keys"]["keys"])


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _int(v) -> int | None:
    return v if type(v) is int else None


def _strs(v) -> tuple[str, ...]:
    return tuple(x for x in v if isinstance(x, str)) if isinstance(v, list) else ()


def normalize_kv(raw, where: str) -> KVCacheDeclaration | None:
    """A declared KV cache precision: "fp8" (8-bit float), "nvfp4" (4-bit float), else the
    raw value lower-cased; None for an empty declaration."""
    if raw is None or raw == "" or raw == {}:
        return None
    if isinstance(raw, dict):
        bits, kind = raw.get("num_bits"), raw.get("type")
        if kind == "float" and bits == 8:
            dtype = "fp8"
        elif kind == "float" and bits == 4:
            dtype = "nvfp4"
        elif kind == "int" and type(bits) is int:
            dtype = f"int{bits}"
        else:
            dtype = "unknown"
    elif isinstance(raw, str):
        low = raw.strip().lower()
        dtype = {"fp8": "fp8", "fp8_e4m3": "fp8", "nvfp4": "nvfp4", "int8": "int8"}.get(low, low or "unknown")
    else:
        dtype = "unknown"
    return KVCacheDeclaration(dtype=dtype, where=where, raw=raw)


def _first_kv(cfg: dict, where: str) -> KVCacheDeclaration | None:
    """modelopt / compressed-tensors: the first non-empty of the engine's KV keys, in its order."""
    for dotted in kv_cache_keys():
        d = cfg
        *parents, leaf = dotted.split(".")
        for p in parents:
            d = _dict(d.get(p))
        value = d.get(leaf)
        if value:
            return normalize_kv(value, _join(where, dotted))
    return None


def _join(where: str, key: str) -> str:
    """"config.json:quantization_config" + "kv_cache_scheme", "hf_quant_config.json" + "quantization..."."""
    return f"{where}:{key}" if where.endswith(".json") else f"{where}.{key}"


def _first_weights_group(cfg: dict) -> dict:
    for group in _dict(cfg.get("config_groups")).values():
        w = _dict(_dict(group).get("weights"))
        if w:
            return w
    return {}


def _ct_scheme(weights: dict, acts: dict) -> str | None:
    """A compressed-tensors config group's scheme in the usual short words."""
    bits, kind, group = weights.get("num_bits"), weights.get("type"), weights.get("group_size")
    if kind == "float" and bits == 4 and group == NVFP4_GROUP:
        return "NVFP4" if acts else "NVFP4A16"
    if kind == "float" and bits == 8:
        return "FP8" if acts else "FP8A16"
    if kind == "int" and type(bits) is int:
        abits = acts.get("num_bits") if acts else 16
        return f"W{bits}A{abits}"
    return None


def read_declaration(cfg: dict, where: str, kv_where: str) -> tuple[QuantDeclaration, dict]:
    """One declaration → (QuantDeclaration, normalized fields for QuantSpec)."""
    method_raw = cfg.get("quant_method")
    method_raw = method_raw.lower().replace("compressed_tensors",
                                            "compressed-tensors") if isinstance(method_raw, str) else ""
    producer = _dict(cfg.get("producer"))
    nested = _dict(cfg.get("quantization"))  # hf_quant_config.json layout
    fields: dict = {}
    kv = None

    if producer.get("name") == "modelopt" or method_raw.startswith("modelopt"):
        method = "modelopt"
        algo = nested.get("quant_algo") or cfg.get("quant_algo")
        algo = algo if isinstance(algo, str) else None
        if algo is None and method_raw == "modelopt_fp4":
            algo = "NVFP4"
        w = _first_weights_group(cfg)
        fields.update(
            quant_algo=algo,
            bits=MODELOPT_WEIGHT_BITS.get(algo or "") or _int(w.get("num_bits")),
            group_size=_int(nested.get("group_size")) or _int(cfg.get("group_size")) or _int(w.get("group_size"))
            or (NVFP4_GROUP if algo == "NVFP4" else None),
            ignore=(_strs(nested.get("exclude_modules")) or _strs(cfg.get("exclude_modules"))
                    or _strs(cfg.get("ignore"))),
        )
        kv = _first_kv(cfg, kv_where)
    elif method_raw == "compressed-tensors":
        method = "compressed-tensors"
        groups = [_dict(g) for g in _dict(cfg.get("config_groups")).values()]
        w = _first_weights_group(cfg)
        acts = next((_dict(g.get("input_activations")) for g in groups if g.get("input_activations")), {})
        block = w.get("block_structure")
        fields.update(
            quant_algo=_ct_scheme(w, acts),
            bits=_int(w.get("num_bits")),
            group_size=_int(w.get("group_size")),
            weight_block_size=tuple(block) if isinstance(block, list) and all(type(b) is int for b in block) else None,
            ignore=_strs(cfg.get("ignore")),
        )
        kv = normalize_kv(cfg.get("kv_cache_scheme"), _join(kv_where, "kv_cache_scheme"))
    elif method_raw == "fp8":
        method = "fp8"
        block = cfg.get("weight_block_size")
        block = tuple(block) if isinstance(block, list) and block and all(type(b) is int for b in block) else None
        fields.update(
            quant_algo="FP8_BLOCK" if block else "FP8",
            bits=8,
            weight_block_size=block,
            ignore=_strs(cfg.get("modules_to_not_convert")) or _strs(cfg.get("ignored_layers")),
        )
    elif method_raw == "fbgemm_fp8":
        # Meta's FP8 releases: per-channel FP8 weights, modules_to_not_convert kept in 16 bits
        # (vllm/model_executor/layers/quantization/fbgemm_fp8.py@v0.5.3 and @v0.16.0 from_config)
        method = "fbgemm_fp8"
        fields.update(quant_algo="FP8", bits=8, ignore=_strs(cfg.get("modules_to_not_convert")))
    elif method_raw == "mxfp4":
        method = "mxfp4"
        fields.update(quant_algo="MXFP4", bits=4, group_size=MX_BLOCK, ignore=_strs(cfg.get("modules_to_not_convert")))
    elif method_raw in ("awq", "gptq"):
        method = method_raw
        fields.update(
            quant_algo=method_raw.upper(),
            bits=_int(cfg.get("bits")) or _int(cfg.get("w_bit")),
            group_size=_int(cfg.get("group_size")) or _int(cfg.get("q_group_size")),
            ignore=_strs(cfg.get("modules_to_not_convert")),
        )
    elif method_raw == "bitsandbytes" or cfg.get("load_in_4bit") is True or cfg.get("load_in_8bit") is True:
        method = "bitsandbytes"
        four = cfg.get("load_in_4bit") is True
        qtype = cfg.get("bnb_4bit_quant_type") if four else None
        fields.update(
            quant_algo=(qtype.upper() if isinstance(qtype, str) else ("INT4" if four else "INT8")),
            bits=4 if four else 8,
            ignore=_strs(cfg.get("llm_int8_skip_modules")),
        )
    else:
        method = method_raw or "unknown"
        fields.update(bits=_int(cfg.get("bits")), group_size=_int(cfg.get("group_size")))

    if producer.get("name"):
        version = producer.get("version")
        fields["producer"] = f"{producer['name']} {version}" if isinstance(version, str) else str(producer["name"])
    decl = QuantDeclaration(where=where, method=method, raw=cfg, quant_algo=fields.get("quant_algo"), kv_cache=kv)
    return decl, fields


def read_quantization(
    config: dict, hf_quant_config: dict | None
) -> tuple[QuantSpec | None, KVCacheDeclaration | None, list[str]]:
    """All declarations → (the QuantSpec the engine reads, its KV cache declaration, notes)."""
    notes: list[str] = []
    found: list[tuple[QuantDeclaration, dict]] = []
    top = config.get("quantization_config")
    top_key = "quantization_config"
    if not isinstance(top, dict):
        if top is not None:
            notes.append(f"config.json quantization_config is {type(top).__name__}, not an object: ignored")
        top = config.get("compression_config") if isinstance(config.get("compression_config"), dict) else None
        top_key = "compression_config"
    if top is not None:
        found.append(read_declaration(top, "config.json", f"config.json:{top_key}"))
    if hf_quant_config is not None:
        found.append(read_declaration(hf_quant_config, "hf_quant_config.json", "hf_quant_config.json"))
    text = config.get("text_config")
    text_q = _dict(text).get("quantization_config") if isinstance(text, dict) else None
    if isinstance(text_q, dict):
        found.append(read_declaration(text_q, "config.json:text_config", "config.json:text_config.quantization_config"))
    if not found:
        return None, None, notes

    # data/quant_sources.json: the top level, then hf_quant_config.json, then text_config.
    decl, fields = found[0]
    spec = QuantSpec(
        method=decl.method,
        declared_in=decl.where,
        declarations=tuple(d for d, _ in found),
        raw=decl.raw,
        **fields,
    )
    for other, _ in found[1:]:
        if (other.method, other.quant_algo) != (decl.method, decl.quant_algo):
            notes.append(f"{other.where} declares {_words(other)} but vLLM reads {decl.where} ({_words(decl)})")
        if other.kv_cache and (decl.kv_cache is None or decl.kv_cache.dtype != other.kv_cache.dtype):
            notes.append(
                f"{other.kv_cache.where} asks for a {other.kv_cache.dtype} KV cache, but vLLM reads "
                f"{decl.where}, which " + (f"asks for {decl.kv_cache.dtype}" if decl.kv_cache else "declares none")
            )
    if spec.method == "unknown":
        notes.append(f"{decl.where} declares quantization without a quant_method servepilot knows")
    return spec, decl.kv_cache, notes


def _words(d: QuantDeclaration) -> str:
    return f"{d.method} {d.quant_algo}" if d.quant_algo else d.method


def mixed_precision_algos(q) -> dict[str, str]:
    """modelopt MIXED_PRECISION: the algorithm of the routed experts and of the other linear
    layers, from `quantized_layers` (module name -> {quant_algo}; vLLM 0.18
    ModelOptMixedPrecisionConfig). The most common algorithm of each kind wins: module names
    in the checkpoint (backbone.layers.N.mixer.experts.K.up_proj) differ from servepilot's
    synthetic tensor names, so the split is by kind. {} for any other scheme."""
    if q is None or (q.quant_algo or "").upper() != "MIXED_PRECISION":
        return {}
    raw = q.raw if isinstance(q.raw, dict) else {}
    layers = _dict(_dict(raw.get("quantization")).get("quantized_layers")) or _dict(raw.get("quantized_layers"))
    counts: dict[str, dict[str, int]] = {"experts": {}, "other": {}}
    for name, entry in layers.items():
        algo = _dict(entry).get("quant_algo")
        if not isinstance(algo, str):
            continue
        kind = "experts" if ".experts." in str(name) else "other"
        counts[kind][algo.upper()] = counts[kind].get(algo.upper(), 0) + 1
    return {kind: max(c, key=c.get) for kind, c in counts.items() if c}
