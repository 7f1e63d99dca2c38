"""The fields of each section of SGLang's fact files (see engines/vllm/knowledge/schema.py)."""

from servepilot.engines.knowledge import VALUE, KeyedRows, Rows

SCHEMA = {
    "builds": {
        "wheels": Rows(("archs",)),
    },
    "engine": {
        "oldest_known": VALUE,
        "newest_known": VALUE,
        "read_releases": VALUE,
    },
    "kv_cache": {
        "valid_dtypes": Rows(("values",)),
        "dtype_bytes": VALUE,
    },
    "quantization": {
        "methods": KeyedRows(("fallback", "min_cc", "native_min_cc")),
    },
}
