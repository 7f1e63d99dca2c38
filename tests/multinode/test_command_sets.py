"""Command sets from the engines' docs (valid) and from real issues (invalid): each gives
exactly the expected node findings (check ids and the nodes they name)."""

from __future__ import annotations

import pytest

from servepilot.multinode.analysis import analyze_command_set

M = "deepseek-ai/DeepSeek-V3"  # not in the cache here: the model is not read, only named
ADDR = "10.0.0.1"


def _files(tmp_path, *commands: str) -> tuple[str, ...]:
    out = []
    for k, text in enumerate(commands):
        p = tmp_path / f"node{k}.sh"
        p.write_text(text + "\n", encoding="utf-8")
        out.append(str(p))
    return tuple(out)


def _mp(rank: int, extra: str = "", tp: int = 8) -> str:
    return f"vllm serve {M} -tp {tp} -pp 2 --nnodes 2 --node-rank {rank} --master-addr {ADDR} {extra}"


def _dp(start: int | None, extra: str = "") -> str:
    s = f" --data-parallel-start-rank {start}" if start is not None else ""
    return (f"vllm serve {M} -dp 4 --data-parallel-size-local 2{s} --data-parallel-address {ADDR} "
            f"--data-parallel-rpc-port 13345 --enable-expert-parallel {extra}")


def _sgl(rank: int, addr: str = f"{ADDR}:20000", extra: str = "") -> str:
    return (f"python -m sglang.launch_server --model-path {M} --tp 16 --dist-init-addr {addr} --nnodes 2 "
            f"--node-rank {rank} {extra}")


LWS_LEADER = (f"vllm serve {M} --tensor-parallel-size 8 --pipeline-parallel-size $(LWS_GROUP_SIZE) "
              "--nnodes $(LWS_GROUP_SIZE) --node-rank $(LWS_WORKER_INDEX) --master-addr $(LWS_LEADER_ADDRESS)")

# name: (node commands or a single Ray command, options, expected {(check, nodes)})
CASES = {
    # valid, from the engines' docs
    "vllm-ray (parallelism_scaling.md)": ([f"vllm serve {M} -tp 8 -pp 2 --distributed-executor-backend ray"],
                                          {"nodes": 2, "gpu": "h200x8"}, set()),
    "vllm-mp (PR 23691)": ([_mp(0), _mp(1, "--headless")], {"gpu": "h200x8", "engine_version": "0.13.0"}, set()),
    "vllm-dp (data_parallel_deployment.md)": ([_dp(None), _dp(2, "--headless")], {"gpu": "h100x2"}, set()),
    "vllm-dp hybrid LB": ([_dp(None, "--data-parallel-hybrid-lb"), _dp(2, "--data-parallel-hybrid-lb")],
                          {"gpu": "h100x2"}, set()),
    "vllm ray DP": ([f"vllm serve {M} -dp 16 --data-parallel-size-local 8 --data-parallel-backend ray"],
                    {"nodes": 2, "gpu": "h200x8"}, set()),
    "sglang (multi_node.md)": ([_sgl(0), _sgl(1)], {"gpu": "h200x8"}, set()),
    "sglang DP attention + EP": ([_sgl(0, extra="--dp-size 16 --enable-dp-attention --ep-size 16"),
                                  _sgl(1, extra="--dp-size 16 --enable-dp-attention --ep-size 16")],
                                 {"gpu": "h200x8"}, set()),
    "LWS leader + worker (lws docs)": ([LWS_LEADER, LWS_LEADER + " --headless"], {"gpu": "h200x8"}, set()),
    # invalid, from issues
    "duplicate --node-rank": ([_mp(0), _mp(0, "--headless")], {"gpu": "h200x8"},
                              {("node.rank_invalid", ("node0", "node1"))}),
    "sglang dist-init-addr differs (sglang#2658)": ([_sgl(0), _sgl(1, addr="10.0.0.2:20000")], {"gpu": "h200x8"},
                                                    {("node.rendezvous_mismatch", ("node1",))}),
    "missing --headless": ([_mp(0), _mp(1)], {"gpu": "h200x8"}, {("node.headless_missing", ("node1",))}),
    "TP 16 on 8-GPU nodes, no multi-node launch (NeMo-Skills#1059)": (
        [f"vllm serve {M} -tp 16", f"vllm serve {M} -tp 16"], {"gpu": "h100x8"},
        {("node.local_world_size", ("node0",)), ("node.local_world_size", ("node1",))}),
    "DP start-rank gap": ([_dp(None), _dp(3, "--headless")], {"gpu": "h100x2"},
                          {("node.dp_start_rank", ("node1",))}),
    "local world size 16 > 8 (vllm PR 28873)": ([_mp(0, tp=16), _mp(1, "--headless", tp=16)], {"gpu": "h100x8"},
                                                {("node.gpu_product", ("node0", "node1")),
                                                 ("node.local_world_size", ("node0",)),
                                                 ("node.local_world_size", ("node1",))}),
    "model differs": ([_mp(0), _mp(1, "--headless").replace(M, "/models/other")], {"gpu": "h200x8"},
                      {("node.model_mismatch", ("node1",))}),
    "Ray plan over 2 nodes of 4 (vllm#29447)": ([f"vllm serve {M} -tp 8 -pp 2 --distributed-executor-backend ray"],
                                                {"nodes": 2, "gpu": "h100x4"},
                                                {("node.gpu_product", ("node0", "node1"))}),
    "hybrid LB with --headless": ([_dp(None, "--data-parallel-hybrid-lb"),
                                   _dp(2, "--data-parallel-hybrid-lb --headless")], {"gpu": "h100x2"},
                                  {("node.headless_hybrid_lb", ("node1",))}),
    "same VLLM_HOST_IP on two nodes (vllm#7815)": ([f"VLLM_HOST_IP=10.0.0.1 {_mp(0)}",
                                                    f"VLLM_HOST_IP=10.0.0.1 {_mp(1, '--headless')}"],
                                                   {"gpu": "h200x8"},
                                                   {("node.host_ip_duplicate", ("node0", "node1"))}),
    "--nnodes 2 with 3 commands": ([_mp(0), _mp(1, "--headless"), _mp(2, "--headless")], {"gpu": "h200x8"},
                                   {("node.count_mismatch", ("node0", "node1", "node2")),
                                    ("node.rank_invalid", ("node2",))}),
    "TP differs": ([_mp(0), _mp(1, "--headless", tp=4)], {"gpu": "h200x8"}, {("node.size_mismatch", ("node1",))}),
    "native multi-node flags on vLLM 0.11 (before PR 23691)": (
        [_mp(0), _mp(1, "--headless")], {"gpu": "h200x8", "engine_version": "0.11.0"},
        {("node.flag_unavailable", ("node0", "node1"))}),
    "vllm external LB, one DP rank per server (data_parallel_deployment.md)": (
        [f"vllm serve {M} -dp 2 --data-parallel-rank {k} --data-parallel-address {ADDR} --data-parallel-rpc-port 13345"
         for k in range(2)], {"gpu": "h100x1"}, set()),
    "Ray DP replica larger than a node without span": (
        [f"vllm serve {M} -dp 2 -tp 16 --data-parallel-backend ray"], {"nodes": 4, "gpu": "h200x8"},
        {("node.ray_dp_span", ())}),
    "Ray DP replica spanning nodes with VLLM_RAY_DP_PACK_STRATEGY=span": (
        [f"VLLM_RAY_DP_PACK_STRATEGY=span vllm serve {M} -dp 2 -tp 16 --data-parallel-backend ray"],
        {"nodes": 4, "gpu": "h200x8"}, set()),
    "LWS one template for 2 pods (no --headless)": ([LWS_LEADER], {"nodes": 2, "gpu": "h200x8"},
                                                   {("node.headless_missing", ("node1",))}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_command_set_gives_exactly_the_expected_findings(tmp_path, name):
    commands, options, expected = CASES[name]
    if len(commands) == 1 and "ray" in commands[0]:
        a = analyze_command_set(commands[0], **options)
    else:
        a = analyze_command_set(command_files=_files(tmp_path, *commands), **options)
    got = {(f.check, f.nodes) for f in a.findings}
    if options.get("engine_version") == "0.11.0":  # one finding per flag: --nnodes, --node-rank, --master-addr
        assert sorted(f.finding.title for f in a.findings) == [
            "vllm 0.11.0 has no --master-addr", "vllm 0.11.0 has no --nnodes", "vllm 0.11.0 has no --node-rank"]
        assert a.command_set.shape == "vllm-mp"
    assert got == expected
    assert all(f.finding.category in ("node_mismatch",) for f in a.findings)
    assert all(f.finding.remedies and f.finding.evidence for f in a.findings)


def test_enough_command_sets():
    assert sum(1 for _, _, e in CASES.values() if not e) >= 6
    assert sum(1 for _, _, e in CASES.values() if e) >= 6


def test_topology_of_native_multinode(tmp_path):
    a = analyze_command_set(command_files=_files(tmp_path, _mp(0), _mp(1, "--headless")), gpu="h200x8")
    t = a.topology
    assert (t.world_size, t.node_count, t.api_nodes) == (16, 2, ("node0",))
    assert [(n.first_rank, n.ranks) for n in t.nodes] == [(0, 8), (8, 8)]
    assert a.head.cluster.count == 16


def test_dp_topology_gives_dp_ranks_per_node(tmp_path):
    a = analyze_command_set(command_files=_files(tmp_path, _dp(None), _dp(2, "--headless")), gpu="h100x2")
    assert [n.dp_ranks for n in a.topology.nodes] == [(0, 1), (2, 3)]
    assert a.topology.api_nodes == ("node0",)


def test_findings_carry_the_release_of_the_flag(tmp_path):
    a = analyze_command_set(command_files=_files(tmp_path, _mp(0), _mp(1)), gpu="h200x8")
    facts = [e.fact for f in a.findings for e in f.finding.evidence]
    assert any("--headless exists in vllm >=0.10.1.1" in x for x in facts)


def test_single_non_ray_command_with_nodes_is_bad_input():
    from servepilot.errors import BadInput

    with pytest.raises(BadInput, match="only read for Ray launches"):
        analyze_command_set(f"vllm serve {M} -tp 8".split(), nodes=2)


def test_ray_command_without_node_count_is_bad_input(tmp_path):
    from servepilot.errors import BadInput

    with pytest.raises(BadInput, match="--nodes N or --ray-address"):
        analyze_command_set(command_files=_files(tmp_path, f"vllm serve {M} --distributed-executor-backend ray"),
                            nodes=None)


def test_ray_launch_on_vllm_018_says_ray_is_not_bundled():
    a = analyze_command_set(f"vllm serve {M} -tp 8 -pp 2 --distributed-executor-backend ray".split(), nodes=2,
                            gpu="h200x8", engine_version="0.18.0")
    assert [(f.check, f.severity) for f in a.findings] == [("node.ray_not_bundled", "info")]
    older = analyze_command_set(f"vllm serve {M} -tp 8 -pp 2 --distributed-executor-backend ray".split(), nodes=2,
                                gpu="h200x8", engine_version="0.16.0")
    assert older.findings == ()


def test_check_and_deployment_cli_on_a_command_set(tmp_path, capsys):
    import json

    from servepilot.cli.main import main

    files = _files(tmp_path, _mp(0), _mp(1))
    args = ["--gpu", "h200x8", "--command-file", files[0], "--command-file", files[1], "--json"]
    assert main(["check", *args]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "servepilot.check/1" and out["verdict"] == "fail"
    assert out["findings"][0]["check"] == "node.headless_missing" and out["findings"][0]["category"] == "node_mismatch"
    assert out["multinode"]["world_size"] == 16
    assert main(["deployment", *args]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [n["serves_api"] for n in out["multinode"]["nodes"]] == [True, False]

