"""The engine registry: one record per engine, and every reader of its option names uses it."""

import pytest

from servepilot.checks import sizes
from servepilot.deployment import build_deployment
from servepilot.engines.cmdline import parse_command
from servepilot.engines.registry import ENGINES, canonical_name, engine_record, find_engine
from servepilot.errors import BadInput
from servepilot.planning.plan import PLANNERS, plan_deployment

MODEL = "examples/llama-3.1-8b"


def test_each_record_has_its_modules_and_a_planner():
    for record in ENGINES:
        assert record.cmdline.detect is not None
        assert callable(record.resolver.resolve)
        assert record.logs.PHASES
        assert record.name in PLANNERS


@pytest.mark.parametrize("spelling", ["llama.cpp", "llamacpp", "llama-cpp", "LLAMA.CPP"])
def test_llamacpp_aliases_map_once(spelling):
    assert canonical_name(spelling) == "llama.cpp"
    assert find_engine(spelling) is engine_record("llama.cpp")


def test_unknown_engine_is_bad_input():
    with pytest.raises(BadInput, match="expected one of vllm, sglang, llama.cpp"):
        engine_record("tgi")


@pytest.mark.parametrize("flag", [["--tp", "4"], ["--tp-size", "4"]])
def test_sglang_tp_is_read_under_sglangs_own_name(flag):
    # Before the registry EngineLaunch read only vLLM's tensor_parallel_size: SGLang --tp 4 gave 1.
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", MODEL, *flag, "--pp-size", "2"]
    launch = parse_command(cmd, engine_version="0.5.6")
    assert launch.tensor_parallel_size == 4
    assert launch.pipeline_parallel_size == 2
    assert sizes.tp(launch) == 4
    dep = build_deployment(cmd, gpu="h100x8", engine_version="0.5.6")
    plan = plan_deployment(dep)
    assert (plan.tp, plan.pp) == (4, 2)
    assert len(plan.rows) == 8


def test_expert_parallel_under_each_engines_option():
    sg = parse_command(["python", "-m", "sglang.launch_server", "--model-path", MODEL, "--tp", "4",
                        "--ep-size", "4"], engine_version="0.5.6")
    assert sg.expert_parallel and sg.expert_parallel_size == 4
    vl = parse_command(["vllm", "serve", MODEL, "-tp", "4", "--enable-expert-parallel"], engine_version="0.16.0")
    assert vl.expert_parallel and vl.expert_parallel_size == 4
    off = parse_command(["vllm", "serve", MODEL, "-tp", "4"], engine_version="0.16.0")
    assert not off.expert_parallel and off.expert_parallel_size == 1


def test_llamacpp_has_no_tensor_parallel_option():
    launch = parse_command(["llama-server", "-m", "x.gguf"])
    assert launch.tensor_parallel_size == 1


def test_startup_markers_have_one_owner_per_engine():
    # triage's banner / readiness / stage tables are joined from the engines' log modules.
    from servepilot.triage import markers

    for record in ENGINES:
        logs = record.logs
        for kind, pattern, source in logs.BANNERS:
            assert source and any(k == kind and p.pattern == pattern for k, p in markers.BANNERS)
        for stage, pattern, source in logs.STAGES:
            assert stage in markers.STAGE_ORDER and source
            assert pattern in dict(markers.PHASES)[stage].pattern
    assert markers.phase_of("Capture cuda graph begin") == "cuda_graph_capture"
    assert markers.phase_of("Graph capturing finished in 5 secs") == "after_cuda_graph_capture"
    assert markers.guess_engine(b"INFO server_args=ServerArgs(model_path='x', ...) vllm") == "sglang"
