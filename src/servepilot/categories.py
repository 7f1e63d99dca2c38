"""The failure categories of DESIGN.md: findings and diagnoses use exactly these words."""

CATEGORIES: tuple[str, ...] = (
    "kv_cache_dtype",
    "attention_backend",
    "quantization_support",
    "oom_weights",
    "oom_kv_cache",
    "max_model_len",
    "tp_divisibility",
    "nccl_distributed",
    "remote_code",
    "unsupported_arch",
    "tokenizer_template",
    "port_in_use",
    "shm",
    "cuda_driver_arch",
    "cuda_graph",
    # nodes of one multi-node deployment disagree: ranks, sizes, versions, checkpoint copies
    "node_mismatch",
    "other",
)

# The kinds of remedy a finding or a diagnosis offers (DESIGN.md); shared by checks and triage.
REMEDY_KINDS: tuple[str, ...] = ("flag", "overlay", "upgrade", "hardware", "env")


def check_category(category: str) -> str:
    """Return `category` unchanged, or raise if it is not one of the contract's words."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
    return category
