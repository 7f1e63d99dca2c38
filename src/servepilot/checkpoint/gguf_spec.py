"""A GGUF model (one file or a split set) → ModelSpec, from llama.cpp's metadata keys.

Keys are those of gguf.constants.Keys (gguf-py in ggml-org/llama.cpp): general.architecture,
{arch}.context_length, {arch}.block_count, {arch}.attention.head_count(_kv), ...
"""

from __future__ import annotations

from pathlib import Path

from servepilot.checkpoint.families import find_gguf_family
from servepilot.checkpoint.gguf_reader import read_gguf_file, split_siblings
from servepilot.checkpoint.spec import (
    AttentionSpec,
    GGUFInfo,
    ModelSpec,
    MoESpec,
    QuantSpec,
    TensorInfo,
    WeightsInfo,
)
from servepilot.errors import HeaderError


def _int(meta: dict, key: str) -> int | None:
    v = meta.get(key)
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return max(v)  # per-layer arrays (e.g. head_count_kv of hybrid models): the largest
    return None


def _file_type_name(meta: dict) -> str | None:
    ft = meta.get("general.file_type")
    if not isinstance(ft, int) or isinstance(ft, bool):
        return None
    from gguf import LlamaFileType

    try:
        return LlamaFileType(ft).name
    except ValueError:
        return f"file_type {ft}"


def spec_from_gguf(path: Path) -> ModelSpec:
    files, missing = split_siblings(path)
    problems: list[str] = []
    if missing:
        problems.append(f"split GGUF is missing {len(missing)} file(s): {', '.join(missing[:5])}")
    first = read_gguf_file(files[0])  # the metadata lives in the first split; damage there is fatal
    parts = [first]
    for p in files[1:]:
        try:
            parts.append(read_gguf_file(p))
        except HeaderError as exc:
            problems.append(f"damaged split {p.name}: {exc.problem}")

    meta = first.metadata
    arch = meta.get("general.architecture") if isinstance(meta.get("general.architecture"), str) else None
    family = find_gguf_family(arch)
    unknown: list[str] = []
    if arch is None:
        unknown.append("general.architecture missing: attention geometry unknown")
    elif family is None:
        unknown.append(f"GGUF architecture {arch!r} is not a family servepilot knows: attention geometry read from "
                       "standard keys only")

    def k(suffix: str) -> int | None:
        return _int(meta, f"{arch}.{suffix}") if arch else None

    tensor_types: dict[str, int] = {}
    elements: dict[str, int] = {}
    tensors: list[TensorInfo] = []
    for part in parts:
        for t, n in part.tensor_types.items():
            tensor_types[t] = tensor_types.get(t, 0) + n
        for t, n in part.elements_by_type.items():
            elements[t] = elements.get(t, 0) + n
        shard = Path(part.path).name
        tensors.extend(TensorInfo(name=n, dtype=ty, shape=sh, nbytes=b, shard=shard) for n, ty, sh, b in part.tensors)

    layers, heads = k("block_count"), k("attention.head_count")
    kv_heads = k("attention.head_count_kv") or heads
    embedding = k("embedding_length")
    file_type = _file_type_name(meta)
    info = GGUFInfo(
        architecture=arch,
        file_size=sum(p.file_size for p in parts),
        tensor_types=dict(sorted(tensor_types.items(), key=lambda kv: -kv[1])),
        context_length=k("context_length"),
        block_count=layers,
        head_count=heads,
        head_count_kv=kv_heads,
        embedding_length=embedding,
        split_files=tuple(Path(p.path).name for p in parts) if len(files) > 1 or missing else (),
        file_type=file_type,
        tokenizer_model=_str(meta, "tokenizer.ggml.model"),
        tokenizer_pre=_str(meta, "tokenizer.ggml.pre"),
    )

    attention = None
    if layers and heads:
        head_dim = k("attention.key_length") or (embedding // heads if embedding else 0)
        kv_lora = k("attention.kv_lora_rank")
        window = k("attention.sliding_window")
        if kv_lora and family is not None and family.attention == "mla":
            # llama.cpp deepseek2: key_length = qk_nope + qk_rope (192), rope.dimension_count = qk_rope (64)
            rope = k("rope.dimension_count")
            nope = head_dim - rope if head_dim and rope is not None and head_dim > rope else None
            attention = AttentionSpec(kind="mla", num_layers=layers, num_heads=heads, num_kv_heads=kv_heads or heads,
                                      head_dim=head_dim, kv_lora_rank=kv_lora, q_lora_rank=k("attention.q_lora_rank"),
                                      qk_rope_head_dim=rope, qk_nope_head_dim=nope,
                                      v_head_dim=k("attention.value_length"))
        else:
            kind = "mqa" if kv_heads == 1 and heads > 1 else "gqa" if (kv_heads or heads) < heads else "mha"
            attention = AttentionSpec(kind=kind, num_layers=layers, num_heads=heads, num_kv_heads=kv_heads or heads,
                                      head_dim=head_dim, sliding_window=window)
    else:
        unknown.append("block_count / attention.head_count missing: attention geometry unknown")

    moe = None
    experts = k("expert_count")
    if experts:
        moe = MoESpec(num_experts=experts, experts_per_token=k("expert_used_count") or 0,
                      num_shared_experts=k("expert_shared_count") or 0,
                      first_dense_layers=k("leading_dense_block_count") or 0,
                      expert_intermediate_size=k("expert_feed_forward_length"))

    weights = WeightsInfo(
        source="gguf",
        total_bytes=sum(p.tensor_bytes for p in parts),
        shards=len(parts),
        params_by_dtype=dict(sorted(elements.items(), key=lambda kv: -kv[1])),
        total_params=sum(elements.values()),
        damaged=tuple(pr for pr in problems if pr.startswith("damaged")),
        tensors=tuple(tensors),
    )
    quant = QuantSpec(method="gguf", quant_algo=file_type, declared_in=Path(files[0]).name)
    return ModelSpec(
        path=str(path),
        format="gguf",
        architectures=(arch,) if arch else (),
        model_type=arch,
        family=family.family if family else None,
        hidden_size=embedding,
        intermediate_size=k("feed_forward_length"),
        vocab_size=k("vocab_size") or meta.get("tokenizer.ggml.tokens#len"),
        max_position_embeddings=info.context_length,
        attention=attention,
        moe=moe,
        quant=quant,
        weights=weights,
        gguf=info,
        unknown=tuple(unknown),
        problems=tuple(problems),
    )


def _str(meta: dict, key: str) -> str | None:
    value = meta.get(key)
    return value if isinstance(value, str) else None
