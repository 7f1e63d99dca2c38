"""The fields of each section of SGLang's fact files (see engines/vllm/knowledge/schema.py)."""

from servepilot.engines.knowledge import VALUE, KeyedRows, Rows

SCHEMA = {
    "attention": {
        "choices": Rows(("values",)),
        "defaults": Rows(("where", "mha", "mla", "arch_overrides", "mla_forces")),
        "fa3_default_architectures": Rows(("values",)),
        "mla_backends": Rows(("values",)),
        "page_size": Rows(("forced", "keeps", "forced_mha_sm100")),
        "fa3_e5m2_fallback": Rows(("backend",)),
        "refusals": Rows(("backend", "stage", "fa3_rule", "cc_major_not_in", "cc_major_in", "mla",
                          "kv_not_in", "kv_in", "archs", "error", "category")),
        "unmodelled_architectures": Rows(("values", "prefix")),
        "known_differences": Rows(("when", "servepilot_error_starts", "reason")),
        "forced_refusals": Rows(("backend", "reads", "cc_major_not_in", "fa3_rule", "error")),
        "hybrid_gdn_blackwell": Rows(("model_types", "blackwell_majors", "allowed", "allowed_sm120",
                                      "checks", "error")),
        "architecture_backends": Rows(("archs", "supported", "reads", "error")),
    },
    "architectures": {
        "read": VALUE,
        "source": VALUE,
        "transformers_fallback": Rows(()),
        "architectures": VALUE,
    },
    "memory": {
        "mem_fraction_static": Rows(("kind", "parallel", "small_gpu_max_mib", "table",
                                     "large_fraction", "large_reserved_mib",
                                     "raise_above_mib", "tiers", "dp_attention_extra_gib", "base_mib",
                                     "per_prefill_token_mib", "per_graph_bs_mib", "per_parallel_mib",
                                     "piecewise_mha_mib_per_size", "piecewise_mla_mib", "floor_mib",
                                     "floor_above_mib")),
        "size_defaults": Rows(("tiers",)),
        "piecewise_capture_sizes": Rows(("ranges", "mla_max_tokens", "disabled_archs")),
    },
    "builds": {
        "wheels": Rows(("archs",)),
        "pdmux_majors": Rows(("majors", "error")),
        "custom_all_reduce": Rows(("world_sizes", "probe_max_pcie_world_size")),
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
        "methods": KeyedRows(("fallback", "min_cc", "native_min_cc", "engine_name")),
        "fp8_below_native": Rows(("auto_marlin", "env_marlin", "block_marlin",
                                  "marlin_needs_vllm")),
        "fp8_block_moe": Rows(("message",)),
    },
}
