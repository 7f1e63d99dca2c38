"""The fields of each section of vLLM's fact files; knowledge.load_file checks rows against
them once at load. A new field in a YAML row is declared here (a misspelt one is an error
naming the file and the row). `versions` and `source` are on every row and not listed."""

from servepilot.engines.knowledge import VALUE, KeyedRows, Rows

SCHEMA = {
    "architectures": {
        "read": VALUE,
        "source": VALUE,
        "early": VALUE,
        "architectures": VALUE,
        "early_reads": VALUE,
    },
    "attention": {
        "selection": Rows(("mode", "validates_block_size")),
        "forcing": Rows(("env_deprecated", "env_honoured", "flag", "config_flag")),
        "block_size": Rows(("default", "from_backend", "sm100_forces_flashinfer_mla", "given_block_adjusted",
                            "mla_family_100", "mla_family_100_flashinfer", "mla_hopper", "sparse_mla_block",
                            "sparse_mla_block_kept")),
        "priorities": Rows(("mla", "non_mla", "mla_major_10_few_heads", "mla_major_10_fp8_kv", "mla_sparse")),
        "backends": KeyedRows(("block_sizes", "combination", "compute_capability", "kv_cache_dtypes", "mla",
                               "sparse", "dtypes", "fp8_e4m3_min_cc", "fp8_min_cc", "fp8_kv_families", "head_size_rule",
                               "head_sizes", "impl_rejects_fp8", "sink_families", "sinks_need_trtllm_cubins",
                               "fp8_kv_values", "impl_rejects_sliding_window", "impl_rejects_sinks_off_fa3",
                               "sinks_need_trtllm", "trtllm_fp8_query_rejects_sinks",
                               "sinks_refused_without_trtllm_run")),
        "logits_soft_cap": Rows(("message", "needs_backend", "fa2_min_cc", "fa3_without_softcap")),
        "flashinfer_v0_profile_fa2": Rows(("message", "fa2_min_cc")),
        "flashinfer_cubin_dependency": Rows(("wheel_requires_flashinfer_cubin",)),
        "known_differences": Rows(("aspect", "when", "reason")),
    },
    "old_attention": {
        "modelled": Rows(()),
        "v1_engine": Rows(("exists", "default_on", "oracle")),
        "v1_flash_attn_only": Rows(("fa_min_cc", "message")),
        "v1_oracle": Rows(("feature", "value", "category", "message")),
        "v0_selection": Rows(("fa_min_cc", "fa_head_sizes", "fa_fp8_kv_majors",
                              "paged_head_sizes")),
        "v1_selection": Rows(("fa_head_sizes", "other_head_sizes", "flashinfer_first_majors")),
        "pp_architectures": Rows(("architectures",)),
        "bnb_parallel_config": Rows(("condition", "message")),
        "lmcache_v0_connector": Rows(("connector", "accepted_backends", "message")),
        "bnb_model_classes": Rows(("architectures", "unsure")),
    },
    "builds": {
        "wheels": Rows(("archs", "cuda", "reported_missing", "reported_source")),
        "fp4_kernel_targets": Rows(("exact", "wheel_cuda")),
    },
    "config_types": {
        "vllm_configs": Rows(("model_types",)),
        "transformers_configs": Rows(("model_types",)),
    },
    "engine": {
        "oldest_known": VALUE,
        "newest_known": VALUE,
        "read_releases": VALUE,
        "hf_overrides": Rows(("flag", "replaces_whole_dict")),
        "scheduler_budget_below_len": Rows(("message",)),
        "v1_forces_chunked_prefill": Rows(("value", "pooling_spared")),
    },
    "gpu_flags": {
        "flags": Rows(("message", "option", "requires", "value")),
    },
    "kv_cache": {
        "valid_dtypes": Rows(("values",)),
        "modelopt_auto": Rows(("follows_checkpoint", "dict_rules", "string_map")),
        "quant_config_source": Rows(("hf_quant_config_only_without_config_json",)),
        "compressed_tensors_forces_fp8": Rows(("forces_on_auto", "forces_over_explicit")),
        "sparse_mla_dtype_map": Rows(("after_selection", "bfloat16_to", "fp8_to")),
        "dtype_bytes": VALUE,
        "fp8_ds_mla_bytes_per_token_layer": VALUE,
        "v1_fp8_kv_cache": Rows(("supported_cc_majors", "v1_default")),
        "float_kv_must_match_dtype": Rows(("values",)),
    },
    "rocm": {
        "quantization": Rows(("supported", "unsure", "not_on_gfx9")),
        "attention": Rows(("sparse", "sparse_message", "sparse_fp8_kv_message", "forced_mha", "forced_mla",
                           "gfx9_only", "gfx9_message", "forced_others", "forced_other_message",
                           "mla_other_message", "default_mha", "default_mla", "mode",
                           "min_head_size", "mha_dtypes", "mla_dtypes")),
        "builds": Rows(("gfx", "unsure")),
    },
    "quantization": {
        "methods": KeyedRows(("fallback", "min_cc", "fallback_constraints", "moe_native_families",
                              "native_families", "native_min_cc", "scheme_native_min_cc", "native_max_cc")),
        "marlin_overrides": Rows(("map",)),
        "speed": Rows(("fp4_over_bf16", "fp8_over_bf16")),
        "fp8_block_moe": Rows(("message",)),
        "bnb_prequant_tp": Rows(("message",)),
        "ct_wna16_kernel": Rows(("value",)),
        "unquantized_moe_trtllm_block": Rows(("block_k",)),
    },
}
