"""The fields of each section of llama.cpp's fact files (see engines/vllm/knowledge/schema.py)."""

from servepilot.engines.knowledge import VALUE, Rows

SCHEMA = {
    "builds": {
        "old_programs": VALUE,
    },
    "engine": {
        "oldest_known": VALUE,
        "newest_known": VALUE,
        "read_releases": VALUE,
    },
    "kv_cache": {
        "valid_dtypes": Rows(("values",)),
        "quantized_v_needs_flash_attn": Rows(()),
        "dtype_bytes": VALUE,
    },
}
