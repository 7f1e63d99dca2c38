"""servepilot's knowledge-based vLLM resolver against vLLM's own recorded answers.

Every stored answer (tests/data/vllm_golden/vllm-*.jsonl.gz: the engine's config building and
attention selection, one file per release) is compared on three aspects: the backend or the
refusal, the KV cache dtype and the block size. A disagreement passes only when
attention.yaml `known_differences` names it, with its reason and source.
"""

from __future__ import annotations

import json

import pytest
import vllm_golden as G

FILES = G.stored_files()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return G.models_root(str(tmp_path_factory.mktemp("golden-models")))


@pytest.fixture(scope="module")
def grid_cases():
    return {c["id"]: c for c in G.tool.cases(G.tool.load_grid())}


def test_every_release_of_the_issue_is_stored_with_its_date_and_source():
    headers = [G.tool.load_answers(p)[0] for p in FILES]
    releases = {h["release"] for h in headers}
    assert {"0.16.0", "0.18.0", "0.25.0", "0.34.0"} <= releases
    for h in headers:
        assert h["engine"] == "vllm" and h["recorded"][:2] == "20" and h["source"]
    offline = [h for h in headers if not h["nvidia_artifactory"]]
    assert offline and offline[0]["gpus"] == ["b200"]


@pytest.mark.parametrize("path", FILES, ids=[p.name.removesuffix(".jsonl.gz") for p in FILES])
def test_knowledge_agrees_with_every_stored_engine_answer(path, root, grid_cases):
    header, answers = G.tool.load_answers(path)
    assert len(answers) == header["cases"] and answers
    resolver = G.Resolver(root, header["release"], artifactory=header["nvidia_artifactory"])
    unexplained, explained, compared = [], 0, 0
    for cid, answer in answers.items():
        case = grid_cases[cid]
        res = resolver.resolve(case)
        for aspect, ok in G.judge(answer, res).items():
            compared += 1
            if ok:
                continue
            if G.known_difference(answer, case, aspect, header["release"]) is not None:
                explained += 1
                continue
            engine = answer.get("backend") or f"refused at {answer.get('stage')}: {answer.get('error', '')[:120]}"
            unexplained.append(f"[{aspect}] {cid}: engine {engine} kv={answer.get('kv_cache_dtype_final')} "
                               f"block={answer.get('block_size_final')} | servepilot {res.attention_backend} "
                               f"kv={res.kv_cache_dtype} block={res.block_size} refuses={G.refuses(res)}")
    assert compared > 2 * len(answers)
    assert not unexplained, f"{len(unexplained)} disagreements:\n" + "\n".join(unexplained[:40])
    # a known difference that no longer occurs should be removed from the knowledge


def test_known_differences_are_data_with_reasons_and_sources():
    from servepilot.engines import knowledge as kb

    rows = kb.load_file("vllm", "attention")["known_differences"]
    assert isinstance(rows, (list, tuple))  # empty while every stored answer agrees
    for row in rows:
        assert row["aspect"] in ("outcome", "kv",
                                 "block") and row["reason"] and "@v" in row["source"] and row["versions"]


def test_the_comparison_catches_a_wrong_answer(root, grid_cases):
    """The judge is not vacuous: a tampered engine answer disagrees."""
    header, answers = G.tool.load_answers(FILES[0])
    cid = "llama-h128|h100|bfloat16|auto|None"
    res = G.Resolver(root, header["release"]).resolve(grid_cases[cid])
    right = answers[cid]
    assert all(G.judge(right, res).values())
    assert not G.judge(dict(right, backend="TRITON_ATTN"), res)["outcome"]
    assert not G.judge(dict(right, kv_cache_dtype_final="fp8"), res)["kv"]
    assert not G.judge(dict(right, block_size_final=right["block_size_final"] * 2), res)["block"]


# The cases where `check` itself (the CLI, every rule) is run: each release's refusals and a
# spread of the others. The resolver-level comparison above covers the rest.
SAMPLE = [
    ("0.34.0", "llama-h128|h100|float16|bfloat16|None"),
    ("0.34.0", "dsv32-sparse-mla|h100|bfloat16|fp8_e4m3|None"),
    ("0.25.0", "dsv32-sparse-mla|h100|float16|auto|None"),
    ("0.25.0", "llama-h64|h100|bfloat16|fp8_e5m2|None"),
    ("0.18.0", "gptoss-sinks|b200|bfloat16|auto|None"),
    ("0.16.0", "dsv32-sparse-mla|b200|bfloat16|fp8|16"),
    ("0.16.0", "dsv3-mla|rtx-pro-6000|bfloat16|fp8|None"),
]


@pytest.mark.parametrize("release,cid", SAMPLE)
def test_check_cli_says_what_the_engine_said(release, cid, root, grid_cases, capsys):
    from servepilot.cli.main import main

    answers = G.tool.load_answers(G.DATA / f"vllm-{release}.jsonl.gz")[1]
    answer, case = answers[cid], grid_cases[cid]
    code = main(["check", "--json", "--gpu", case["gpu"], "--engine-version", release, "--", *G.command(case, root)])
    data = json.loads(capsys.readouterr().out)
    resolved = data["resolved"]
    if answer.get("ok"):
        assert resolved["attention_backend"] == answer["backend"]
        assert resolved["block_size"] == answer["block_size_final"]
        assert resolved["kv_cache_dtype"] == (answer.get("kv_cache_dtype_final") or "auto")
    else:
        assert data["verdict"] == "fail" and code == 1
        assert resolved["attention_backend"] is None
        if answer.get("stage") == "config":
            assert any("incompatible" in f["detail"] for f in data["findings"])


def test_sinks_on_sm100_say_the_host_decides_and_the_offline_answer(root, capsys):
    from servepilot.cli.main import main

    model = str(root / "gptoss-sinks")
    main(["check", "--json", "--gpu", "b200", "--engine-version", "0.18.0", "--", "vllm", "serve", model])
    data = json.loads(capsys.readouterr().out)
    (info,) = [f for f in data["findings"] if f["code"] == "SP-ATTN-005"]
    offline = G.tool.load_answers(G.DATA / "vllm-0.18.0-b200-offline-artifactory.jsonl.gz")[1]
    assert offline["gptoss-sinks|b200|bfloat16|auto|None"]["backend"] in info["title"]
    assert data["resolved"]["attention_backend"] == "FLASHINFER"
    main(["check", "--json", "--gpu", "b200", "--engine-version", "0.18.0", "--",
          "VLLM_HAS_FLASHINFER_CUBIN=1", "vllm", "serve", model])
    assert not [f for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "SP-ATTN-005"]


@pytest.mark.parametrize("version, host_decides",
                         [("0.10.1", False), ("0.11.0", True), ("0.13.0", True), ("0.18.0", True)])
def test_sinks_on_sm100_leave_the_cubins_unchecked_from_012(version, host_decides, root, capsys):
    # 0.12-0.15 already ask supports_trtllm_attention() (SM100 and the artifactory) in
    # FlashInfer's supports_sink; 0.10-0.11 select FlashInfer on SM100 without asking, and from
    # 0.10.2 its metadata builder then raises for sinks without the cubins (0.10.1 has no raise)
    from servepilot.cli.main import main

    model = str(root / "gptoss-sinks")
    main(["check", "--json", "--gpu", "b200", "--engine-version", version, "--",
          "vllm", "serve", model])
    data = json.loads(capsys.readouterr().out)
    assert bool([f for f in data["findings"] if f["code"] == "SP-ATTN-005"]) is host_decides
    facts = [u["fact"] for u in data["unchecked"]]
    assert ("attention kernels on this host" in facts) is host_decides
    main(["check", "--json", "--gpu", "b200", "--engine-version", version, "--",
          "VLLM_HAS_FLASHINFER_CUBIN=1", "vllm", "serve", model])
    offline_known = json.loads(capsys.readouterr().out)["unchecked"]
    assert "attention kernels on this host" not in [u["fact"] for u in offline_known]


@pytest.mark.parametrize("version,block", [("0.11.0", None), ("0.12.0", 64), ("0.14.1", 64), ("0.17.0", 64)])
def test_sparse_mla_block_is_64_on_sm100_whatever_was_given(version, block, root, grid_cases):
    res = G.Resolver(root, version).resolve(grid_cases["dsv32-sparse-mla|b200|bfloat16|auto|16"])
    if block is None:  # not read for 0.10-0.11: the given size stands
        assert res.block_size == 16
    else:
        assert res.block_size == block


@pytest.mark.parametrize("version,offline_backend", [("0.18.0", "TRITON_ATTN"), ("0.25.0", "FLASHINFER"),
                                                     ("0.34.0", "FLASH_ATTN")])
def test_offline_sinks_follow_whether_the_wheel_brings_flashinfer_cubin(version, offline_backend, root, grid_cases):
    """0.19-0.25 wheels depend on flashinfer-cubin: FlashInfer keeps the sinks without the network."""
    case = grid_cases["gptoss-sinks|b200|bfloat16|auto|None"]
    assert G.Resolver(root, version, artifactory=False).resolve(case).attention_backend == offline_backend
    online = G.Resolver(root, version).resolve(case)
    assert online.attention_backend == "FLASHINFER"
    assert ("environment_decides" in online.extra) == (offline_backend != "FLASHINFER")
