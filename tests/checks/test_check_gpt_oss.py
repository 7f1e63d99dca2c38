"""gpt-oss on vLLM 0.10.1+: MXFP4 expert memory per release and attention sinks per backend.

Facts read from the vLLM sdists named in planning/knowledge/vllm_memory.yaml
(mxfp4_moe_padding, sampler_bytes_per_logit) and engines/vllm/knowledge/attention.yaml.
"""

from __future__ import annotations

from checkfixtures import codes, deployment, finding, gpt_oss_120b

from servepilot.checks import run_checks

H100_MEMORY = 81559 * 2**20  # NVIDIA H100 80GB HBM3 as nvidia-smi reports it


def _h100(path, version, options=None, env=None):
    return deployment(
        path, cc=(9, 0), n=1, version=version, memory=H100_MEMORY, options=options, env=env
    )


def test_gpt_oss_120b_from_pip_on_one_h100_at_0101_has_no_kv_budget(tmp_path):
    # issue #23278: Marlin-padded experts ("Model loading took 65.9651 GiB") and the sorting
    # sampler over 1,024 x 201,088 logits leave "Available KV cache memory: -2.14 GiB"
    result = run_checks(_h100(gpt_oss_120b(tmp_path / "oss"), "0.10.1"))
    assert result.verdict == "fail"
    assert (finding(result, "SP-MEM-003").severity, result.findings[0].category) == (
        "error",
        "oom_kv_cache",
    )


def test_fewer_sequences_leave_a_kv_budget_that_is_too_short_for_131k(tmp_path):
    # the neighbour: a quarter of the sampler warm-up; the KV budget is positive again, and the
    # thread's other report (131k does not start, 100k does) is the max_model_len finding
    result = run_checks(
        _h100(gpt_oss_120b(tmp_path / "oss"), "0.10.1", options={"max_num_seqs": 256})
    )
    assert "SP-MEM-003" not in codes(result)
    assert finding(result, "SP-MEM-002").category == "max_model_len"
    fits = run_checks(
        _h100(
            gpt_oss_120b(tmp_path / "oss"),
            "0.10.1",
            options={"max_num_seqs": 256, "max_model_len": 65536},
        )
    )
    # what is left is 0.10.1's Marlin MoE on Hopper (no triton_kernels in the wheel): a warning
    assert codes(fits) == ["SP-QUANT-002"] and "Marlin" in fits.findings[0].title


def test_from_012_triton_experts_fit_one_h100(tmp_path):
    # 0.12 vendors triton_kernels: Hopper's experts are no longer padded for Marlin
    result = run_checks(_h100(gpt_oss_120b(tmp_path / "oss"), "0.12.0"))
    assert result.verdict == "pass" and result.resolved["quant_kernels"]["moe"] == "native"


def _oss(tmp_path, version, cc, options=None, env=None, artifactory=None):
    from dataclasses import replace

    dep = deployment(
        gpt_oss_120b(tmp_path / "oss"),
        cc=cc,
        n=8,
        version=version,
        memory=180 * 2**30,
        options=options,
        env=env,
    )
    return (
        replace(dep, extra={"nvidia_artifactory": artifactory}) if artifactory is not None else dep
    )


def test_forced_flash_attn_asserts_fa3_for_sinks_off_hopper_on_0_10(tmp_path):
    # FlashAttentionImpl.__init__@v0.10.2: assert vllm_flash_attn_version == 3 ("Sinks are only
    # supported in FlashAttention 3"); 0.10/0.11 take a forced backend without validating it
    forced = run_checks(
        _oss(tmp_path, "0.10.2", (8, 6), env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})
    )
    assert forced.findings[0].code == "SP-ATTN-001"
    assert "Sinks are only supported in FlashAttention 3" in forced.findings[0].detail
    # neighbours: the default picks TRITON_ATTN for sinks off Hopper; Hopper runs FA3
    assert (
        run_checks(_oss(tmp_path, "0.10.2", (8, 6))).resolved["attention_backend"] == "TRITON_ATTN"
    )
    assert "SP-ATTN-001" not in codes(run_checks(_oss(tmp_path, "0.10.2", (8, 6))))
    hopper = run_checks(
        _oss(tmp_path, "0.11.0", (9, 0), env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"})
    )
    assert "SP-ATTN-001" not in codes(hopper)


def test_fa2_forced_on_hopper_by_env_cannot_take_sinks_on_0_11(tmp_path):
    # get_flash_attn_version@v0.11.0: VLLM_FLASH_ATTN_VERSION overrides the FA3 default on 9.x
    fa2 = run_checks(_oss(tmp_path, "0.11.0", (9, 0), env={"VLLM_FLASH_ATTN_VERSION": "2"}))
    assert "Sinks are only supported in FlashAttention 3" in finding(fa2, "SP-ATTN-001").detail
    assert "SP-ATTN-001" not in codes(
        run_checks(_oss(tmp_path, "0.11.0", (9, 0), env={"VLLM_FLASH_ATTN_VERSION": "3"}))
    )


def test_fp8_kv_cache_with_sinks_on_b200_stops_0_11_0_only(tmp_path):
    # use_trtllm_attention@v0.11.0 raises for an FP8 query with sinks; the query follows the fp8
    # KV cache unless VLLM_FLASHINFER_DISABLE_Q_QUANTIZATION=1; 0.12 has the FP8-qkv sinks kernel
    fp8 = {"kv_cache_dtype": "fp8"}
    failed = run_checks(_oss(tmp_path, "0.11.0", (10, 0), options=fp8))
    assert (
        "TRTLLM FP8-qkv kernel is not supported for attention sinks"
        in finding(failed, "SP-ATTN-001").detail
    )
    assert failed.verdict == "fail"
    for version, env in (
        ("0.11.0", {"VLLM_FLASHINFER_DISABLE_Q_QUANTIZATION": "1"}),
        ("0.12.0", {}),
    ):
        assert "SP-ATTN-001" not in codes(
            run_checks(_oss(tmp_path, version, (10, 0), options=fp8, env=env))
        )


def test_flashinfer_without_trtllm_has_no_fallback_for_sinks_on_0_11(tmp_path):
    # FlashInferMetadataBuilder@v0.11.0: "FlashInfer backend currently does not support attention
    # sinks" when TRTLLM attention cannot run (switched off, offline, not exactly SM 10.0)
    message = "FlashInfer backend currently does not support attention sinks"
    for case in (dict(env={"VLLM_USE_TRTLLM_ATTENTION": "0"}), dict(artifactory=False)):
        failed = run_checks(_oss(tmp_path, "0.11.0", (10, 0), **case))
        assert message in finding(failed, "SP-ATTN-001").detail
    forced_on_hopper = run_checks(
        _oss(tmp_path, "0.11.0", (9, 0), env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"})
    )
    assert message in finding(forced_on_hopper, "SP-ATTN-001").detail
    # the network unknown: a note that says what happens offline, not a failure
    unknown = run_checks(_oss(tmp_path, "0.11.0", (10, 0)))
    assert unknown.verdict == "pass" and message in finding(unknown, "SP-ATTN-005").detail
    # from 0.12 validation falls back to TRITON_ATTN offline instead
    offline = run_checks(_oss(tmp_path, "0.13.0", (10, 0), artifactory=False))
    assert offline.resolved["attention_backend"] == "TRITON_ATTN" and "SP-ATTN-001" not in codes(
        offline
    )


def test_kv_budget_only_the_native_sampler_exhausts_is_a_warning_with_both_figures(tmp_path):
    # a 32k context fits beside FlashInfer's sampler but not beside the native sort: the install
    # decides (flashinfer is only the vllm[flashinfer] extra of the 0.10.1 wheel)
    path = gpt_oss_120b(tmp_path / "oss")
    result = run_checks(_h100(path, "0.10.1", options={"max_model_len": 32768}))
    kv = finding(result, "SP-MEM-003")
    assert (kv.severity, result.verdict) == ("warning", "warn")
    assert "with it:" in kv.title and "FlashInfer installed" in kv.detail
    remedies = [r.change for r in kv.remedies]
    assert (
        remedies[0] == "--max-num-seqs 512" and "pip install 'vllm[flashinfer]==0.10.1'" in remedies
    )
    # the install said: the image ships FlashInfer (no finding); VLLM_USE_FLASHINFER_SAMPLER=0 sorts
    from dataclasses import replace

    image = replace(
        _h100(path, "0.10.1", options={"max_model_len": 32768}),
        extra={"container": {"image": "vllm/vllm-openai:v0.10.1"}},
    )
    assert "SP-MEM-003" not in codes(run_checks(image))
    native = run_checks(
        _h100(
            path,
            "0.10.1",
            options={"max_model_len": 32768},
            env={"VLLM_USE_FLASHINFER_SAMPLER": "0"},
        )
    )
    assert finding(native, "SP-MEM-003").severity == "error"


def test_flashinfer_sinks_need_trtllm_every_batch_from_0_12(tmp_path):
    # FlashInferMetadataBuilder@v0.14.1 and @v0.19.0: FlashInfer stays valid for sinks on SM100
    # (supports_sink asks the platform and the cubins only), then raises when TRTLLM attention is
    # switched off or decode context parallelism keeps it from running
    message = "FlashInfer backend currently does not support attention sinks"
    off = {"attention_config": {"use_trtllm_attention": False}}
    for version, case in (
        ("0.14.1", dict(options=off)),
        ("0.19.0", dict(options=off)),
        ("0.12.0", dict(env={"VLLM_USE_TRTLLM_ATTENTION": "0"})),
        ("0.14.1", dict(options={"decode_context_parallel_size": 2})),
    ):
        failed = run_checks(_oss(tmp_path, version, (10, 0), artifactory=True, **case))
        assert message in finding(failed, "SP-ATTN-001").detail, (version, case)
    # neighbours: TRTLLM left on; and from 0.15 the environment variable is no longer read
    assert "SP-ATTN-001" not in codes(
        run_checks(_oss(tmp_path, "0.14.1", (10, 0), artifactory=True))
    )
    ignored = run_checks(
        _oss(tmp_path, "0.19.0", (10, 0), artifactory=True, env={"VLLM_USE_TRTLLM_ATTENTION": "0"})
    )
    assert "SP-ATTN-001" not in codes(ignored)


def test_marlin_mxfp4_on_hopper_names_the_release_that_leaves_it(tmp_path):
    # quantization.yaml: mxfp4 native on Hopper from the 0.12 row (triton_kernels shipped)
    old = finding(
        run_checks(
            _h100(
                gpt_oss_120b(tmp_path / "oss"),
                "0.11.0",
                options={"max_model_len": 8192, "max_num_seqs": 64},
            )
        ),
        "SP-QUANT-002",
    )
    assert old.remedies[0].change == "pip install 'vllm>=0.12.0'"
    assert "padding" in old.detail
    # an Ada card stays on Marlin in every release read: no upgrade to offer
    ada = run_checks(
        deployment(
            gpt_oss_120b(tmp_path / "oss"),
            cc=(8, 9),
            n=4,
            version="0.11.0",
            memory=48 * 2**30,
            options={"max_model_len": 8192},
        )
    )
    assert [r.kind for r in finding(ada, "SP-QUANT-002").remedies] == ["hardware"]


def test_the_planners_mxfp4_kernel_and_the_resolvers_agree_on_marlin(tmp_path):
    # two views of one fact (vllm_memory.yaml pads for the kernel; quantization.yaml says
    # whether it is the Marlin fallback): they must name the same kernel family everywhere
    from servepilot.engines.vllm.resolve import resolve
    from servepilot.planning.facts import fact
    from servepilot.planning.vllm import mxfp4_moe_kernel

    path = gpt_oss_120b(tmp_path / "oss")
    for version in ("0.10.1", "0.10.2", "0.11.0", "0.12.0", "0.13.0", "0.19.0"):
        for cc in ((8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0)):
            res = resolve(deployment(path, cc=cc, n=8, version=version, memory=96 * 2**30))
            kernel = mxfp4_moe_kernel(fact("vllm", "mxfp4_moe_padding", version), cc, {})
            assert (kernel == "marlin") == (res.quant.moe != "native"), (
                version,
                cc,
                kernel,
                res.quant.moe,
            )
