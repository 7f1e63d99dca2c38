#!/usr/bin/env python3
"""Ask SGLang itself what it does with a launch, for a grid of GPUs x models x flags.

Maintainers' tool. For each SGLang release it runs SGLang's own code, on CPU, inside a Python
environment where that release is installed (`--python /tmp/sgl-0.5.2/bin/python`):

1. `ServerArgs(...)` with its real `__post_init__` (memory defaults, page size forcing, the
   attention backend asserts, and, from 0.5.3 on, the default backend choice);
2. `ModelRunner.model_specific_adjustment` (the default backend choice before 0.5.3) and the
   backend constructor dispatch (`init_attention_backend` / `_get_attention_backend_from_str`
   / `attention_registry.ATTENTION_BACKENDS`), whose asserts refuse e.g. FA3 on SM100. These
   methods are compiled from the installed `model_runner.py` (the module itself needs CUDA
   kernels to import); the backend classes they would construct are replaced by recorders.

Only the GPU is faked: `torch.cuda.get_device_capability`, `torch.version.cuda` ("12.8"),
and the memory SGLang reads from nvidia-smi (`get_nvgpu_memory_capacity`, MiB). FlashInfer is
reported installed (it is a dependency of every release read). Model directories are
config-only (config.json), written from the configs stored in the answer file.

    python tools/sglang_golden.py --release 0.5.2 --python /tmp/sgl-0.5.2/bin/python \
        --out tests/engines/sglang_golden/sglang-0.5.2.json

Setting up an environment (no GPU, no CUDA wheels): `python3 -m venv /tmp/sgl-X`, then
`pip install torch` (CPU build), the transformers version the release pins, and
`pip install --no-deps sglang==X` plus the few pure-Python modules its import chain asks for.

A release close to one already set up can instead be run from its unpacked sdist on
PYTHONPATH, in that environment (how sglang-0.5.6.post2.json and sglang-0.5.7.json were
made, in the 0.5.2 environment: torch 2.13 CPU, transformers 4.56.1 where 0.5.7 pins 4.57.1;
gguf added on a --target overlay, torchvision stood in for by an inert package):

    PYTHONPATH=/tmp/sglang-0.5.7:/tmp/overlay python tools/sglang_golden.py --release 0.5.7 \
        --python /tmp/sgl-0.5.2/bin/python --out tests/engines/sglang_golden/sglang-0.5.7.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# GPUs: compute capability and the MiB nvidia-smi reports (servepilot's catalog values).
GPUS = {
    "a100-80gb": {"cc": [8, 0], "mem_mib": 81920},
    "l40s": {"cc": [8, 9], "mem_mib": 46068},
    "h100": {"cc": [9, 0], "mem_mib": 81559},
    "h200": {"cc": [9, 0], "mem_mib": 143771},
    "b200": {"cc": [10, 0], "mem_mib": 183359},
    "rtx-pro-6000": {"cc": [12, 0], "mem_mib": 97887},
    "rtx-5090": {"cc": [12, 0], "mem_mib": 32607},
}

_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16", "hidden_act": "silu",
}
_MISTRAL = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 32768,
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-5,
    "sliding_window": None, "torch_dtype": "bfloat16", "hidden_act": "silu",
}
_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "vocab_size": 129280,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4, "routed_scaling_factor": 2.5,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "max_position_embeddings": 163840, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "torch_dtype": "bfloat16", "hidden_act": "silu", "rms_norm_eps": 1e-6,
    "topk_method": "noaux_tc", "scoring_func": "sigmoid", "norm_topk_prob": True,
}
MODELS = {"llama": _LLAMA, "mistral": _MISTRAL, "deepseek_v3": _DEEPSEEK_V3}

BACKENDS = [None, "flashinfer", "triton", "torch_native", "fa3", "flashmla", "cutlass_mla",
            "trtllm_mla", "trtllm_mha"]
KV_DTYPES = ["auto", "fp8_e4m3", "fp8_e5m2"]


def grid() -> list[dict]:
    """Attention/KV cases at TP 1, and memory-default cases at TP 1-8 with no flags."""
    cases = []
    for gpu in GPUS:
        for model in MODELS:
            for backend in BACKENDS:
                for kv in KV_DTYPES:
                    cases.append({"gpu": gpu, "model": model, "attention_backend": backend,
                                  "kv_cache_dtype": kv, "tp": 1})
            for tp in (2, 4, 8):
                cases.append({"gpu": gpu, "model": model, "attention_backend": None,
                              "kv_cache_dtype": "auto", "tp": tp})
    return cases


# ---------------------------------------------------------------------------------------------
# Child side: runs inside the SGLang environment; imports nothing from servepilot.
# ---------------------------------------------------------------------------------------------

# The GPU the fakes report; switched between groups of cases (one import serves all GPUs).
_CURRENT = {"cc": (9, 0), "mem_mib": 81559}


def _fake_gpu() -> None:
    import types

    import torch

    try:  # torchvision compares its CUDA build with torch.version.cuda at import: before faking
        import torchvision  # noqa: F401
    except ImportError:
        pass
    torch.cuda.is_available = lambda: True
    torch.cuda.get_device_capability = lambda device=None: tuple(_CURRENT["cc"])
    torch.cuda.device_count = lambda: 8
    torch.cuda.get_device_name = lambda device=None: "faked"
    torch.cuda.current_device = lambda: 0
    torch.cuda.set_device = lambda device=None: None
    torch.cuda.mem_get_info = lambda device=None: (_CURRENT["mem_mib"] << 20,) * 2
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(
        major=_CURRENT["cc"][0], minor=_CURRENT["cc"][1], total_memory=_CURRENT["mem_mib"] << 20,
        name="faked", multi_processor_count=132)
    torch.version.cuda = "12.8"
    os.environ.setdefault("SGLANG_IS_FLASHINFER_AVAILABLE", "true")
    if not hasattr(torch._C._cpu, "_is_amx_tile_supported"):  # asked at import by 0.5.1
        torch._C._cpu._is_amx_tile_supported = lambda: False
    _tolerate_fake_kernels(torch)


def _tolerate_fake_kernels(torch) -> None:
    """Meta kernels for sgl_kernel ops (0.5.7's fp8_kernel.py registers them at import when CUDA
    is reported) need the real op; with sgl_kernel stood in for there is none, so skip them."""
    original = torch.library.register_fake

    def register_fake(op, func=None, **kwargs):
        def apply(fn):
            try:
                return original(op, fn, **kwargs)
            except RuntimeError:  # "operator sgl_kernel::... does not exist"
                return fn
        return apply if func is None else apply(func)

    torch.library.register_fake = register_fake


def _switch_gpu(gpu: dict) -> None:
    """Report another GPU: SGLang caches its capability tests (functools.lru_cache)."""
    import functools

    _CURRENT.update(cc=tuple(gpu["cc"]), mem_mib=gpu["mem_mib"])
    for name, module in list(sys.modules.items()):
        if not name.startswith("sglang") or module is None:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()


# CUDA-only packages the import chain reaches; they stand in as inert modules (never called
# on the paths this tool runs: no kernel runs during argument handling).
STUB_PACKAGES = {"sgl_kernel", "flashinfer", "flash_attn", "deep_gemm", "vllm", "triton_kernels",
                 "cuda", "nvtx", "xgrammar", "outlines", "llguidance", "decord",
                 "flash_mla", "aiter", "mooncake", "nixl", "kt_kernel", "tvm_ffi",
                 "quack", "cutlass", "flash_attn_4", "torch_memory_saver", "pynvml"}


def _install_stub_packages() -> None:
    import importlib.abc
    import importlib.machinery
    import types

    class _Anything:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, *args, **kwargs):
            return _Anything()

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Anything()

        def __mro_entries__(self, bases):
            return (object,)

        def __get_pydantic_core_schema__(self, source, handler):
            # 0.5.7's OpenAI protocol models use xgrammar.StructuralTag as a field type
            from pydantic_core import core_schema

            return core_schema.any_schema()

    class _Module(types.ModuleType):
        __path__: list = []

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Anything()

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path, target=None):
            top = fullname.split(".")[0]
            if top in STUB_PACKAGES and top not in real:
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            return None

        def create_module(self, spec):
            return _Module(spec.name)

        def exec_module(self, module):
            module.__path__ = []

    # a package that is installed is used as it is; only absent ones are stood in for
    real = {p for p in STUB_PACKAGES if importlib.machinery.PathFinder.find_spec(p) is not None}
    sys.meta_path.insert(0, _Finder())


def _install_backend_recorders() -> None:
    """Attention backend modules become recorders: constructing a class just succeeds."""
    import importlib.abc
    import importlib.machinery
    import types

    class _Recorder:
        def __init__(self, *args, **kwargs):
            pass

        @classmethod
        def init_new(cls, *args, **kwargs):
            return cls()

    class _Module(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _Recorder

    keep = {"sglang.srt.layers.attention.attention_registry",
            "sglang.srt.layers.attention.base_attn_backend"}

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path, target=None):
            if (fullname.startswith("sglang.srt.layers.attention.") and fullname not in keep
                    and fullname.endswith("_backend")):
                return importlib.machinery.ModuleSpec(fullname, self)
            return None

        def create_module(self, spec):
            return _Module(spec.name)

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, _Finder())


def _runner_methods(names: list[str], namespace: dict) -> dict:
    """Compile the named ModelRunner methods from the installed model_runner.py source."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("sglang.srt.model_executor.model_runner")
    tree = ast.parse(Path(spec.origin).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelRunner")
    for node in tree.body:  # module-level literal tables (e.g. backend lists) the methods read
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                namespace.setdefault(node.targets[0].id, ast.literal_eval(node.value))
            except ValueError:
                pass
    found = [f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name in names]
    module = ast.Module(body=found, type_ignores=[])
    exec(compile(module, spec.origin, "exec"), namespace)
    return {f.name: namespace[f.name] for f in found}


def _utils_module():
    import importlib

    try:
        return importlib.import_module("sglang.srt.utils.common")
    except ImportError:
        return importlib.import_module("sglang.srt.utils")


class _Runner:
    """The ModelRunner attributes the selection code reads; any other one is None (unset)."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def child(groups: list[dict], model_dirs: dict) -> list[dict]:
    import logging
    import types

    logging.disable(logging.CRITICAL)
    _fake_gpu()
    _install_stub_packages()
    _install_backend_recorders()
    utils = _utils_module()
    utils.get_nvgpu_memory_capacity = lambda: _CURRENT["mem_mib"]
    import sglang.srt.server_args as sa_mod
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig

    for mod in (utils, sa_mod):
        if hasattr(mod, "is_flashinfer_available"):
            mod.is_flashinfer_available = lambda: True
    namespace = {k: getattr(utils, k) for k in dir(utils) if not k.startswith("__")}
    namespace.update(logger=logging.getLogger("golden"), torch=__import__("torch"),
                     _is_hip=False, _is_npu=False, _is_cpu_amx_available=False,
                     is_flashinfer_available=lambda: True, ServerArgs=sa_mod.ServerArgs,
                     global_server_args_dict={},
                     get_global_server_args=lambda: types.SimpleNamespace())
    try:
        from sglang.srt.layers.attention import attention_registry as registry
        namespace.update(ATTENTION_BACKENDS=registry.ATTENTION_BACKENDS,
                         attn_backend_wrapper=registry.attn_backend_wrapper)
    except ImportError:
        registry = None
    methods = _runner_methods(["model_specific_adjustment", "init_attention_backend",
                               "_get_attention_backend", "_get_attention_backend_from_str"],
                              namespace)
    out = []
    for group in groups:
        _switch_gpu(group["gpu"])
        for case in group["cases"]:
            out.append({**case, **_one(case, sa_mod, ModelConfig, AttentionArch, methods,
                                       model_dirs, types)})
        print(f"{len(out)} cases done", file=sys.stderr, flush=True)
    return out


def _one(case, sa_mod, ModelConfig, AttentionArch, methods, model_dirs, types) -> dict:
    kwargs = {"model_path": model_dirs[case["model"]], "tp_size": case["tp"],
              "kv_cache_dtype": case["kv_cache_dtype"]}
    if case["attention_backend"]:
        kwargs["attention_backend"] = case["attention_backend"]
    stage = "server_args"
    try:
        args = sa_mod.ServerArgs(**kwargs)
        answer = {"mem_fraction_static": args.mem_fraction_static,
                  "chunked_prefill_size": args.chunked_prefill_size,
                  "cuda_graph_max_bs": args.cuda_graph_max_bs}
        stage = "model_runner"
        config = ModelConfig.from_server_args(args)
        use_mla = config.attention_arch == AttentionArch.MLA
        runner = _Runner(
            server_args=args, model_config=config, use_mla_backend=use_mla,
            tp_size=args.tp_size, dp_size=args.dp_size, is_multimodal=False,
            is_multimodal_chunked_prefill_supported=True, is_hybrid_gdn=False,
            sliding_window_size=None, spec_algorithm=types.SimpleNamespace(is_none=lambda: True),
            is_draft_worker=False, device="cuda", page_size=args.page_size,
            kv_cache_dtype=args.kv_cache_dtype)
        bound = {n: types.MethodType(f, runner) for n, f in methods.items()}
        for name, method in bound.items():
            setattr(runner, name, method)
        if "model_specific_adjustment" in bound:
            bound["model_specific_adjustment"]()
        answer["model_runner_backend"] = args.attention_backend
        stage = "backend_init"
        if "init_attention_backend" in bound:
            bound["init_attention_backend"]()
        answer.update(ok=True, attention_backend=args.attention_backend,
                      prefill_attention_backend=getattr(args, "prefill_attention_backend", None),
                      decode_attention_backend=getattr(args, "decode_attention_backend", None),
                      page_size=args.page_size, kv_cache_dtype=args.kv_cache_dtype,
                      use_mla=use_mla)
        return answer
    except Exception as exc:  # the engine's refusal is the answer
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return {"ok": False, "stage": stage, "error_type": type(exc).__name__, "error": text}


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------

def run_release(release: str, python: str, timeout: int = 3600) -> dict:
    cases = grid()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for name, config in MODELS.items():
            d = Path(tmp) / name
            d.mkdir()
            (d / "config.json").write_text(json.dumps(config))
            dirs[name] = str(d)
        groups = [{"gpu": gpu, "cases": [c for c in cases if c["gpu"] == key]}
                  for key, gpu in GPUS.items()]
        request = json.dumps({"groups": groups, "model_dirs": dirs})
        proc = subprocess.run([python, __file__, "--child"], input=request, text=True,
                              capture_output=True, timeout=timeout, cwd=tmp)
        if proc.returncode != 0:
            raise SystemExit(f"SGLang {release} child failed:\n{proc.stderr[-3000:]}")
        results.extend(json.loads(proc.stdout.strip().splitlines()[-1]))
    version = subprocess.run([python, "-c", "import sglang; print(sglang.__version__)"],
                             text=True, capture_output=True).stdout.strip()
    return {
        "schema": "servepilot.sglang-golden/1",
        "release": release,
        "installed_version": version,
        "date": datetime.date.today().isoformat(),
        "produced_by": ("tools/sglang_golden.py: SGLang's own ServerArgs.__post_init__ and "
                        "ModelRunner backend selection/dispatch run on CPU, GPU capability and "
                        "memory faked, FlashInfer reported installed, torch.version.cuda 12.8"),
        "gpus": GPUS,
        "models": MODELS,
        "cases": results,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--release")
    ap.add_argument("--python", help="python of an environment with that SGLang installed")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.child:
        request = json.loads(sys.stdin.read())
        answers = child(request["groups"], request["model_dirs"])
        sys.stdout.write("\n" + json.dumps(answers) + "\n")
        return
    if not (a.release and a.python and a.out):
        ap.error("--release, --python and --out are required")
    data = run_release(a.release, a.python)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(data, indent=1) + "\n")
    refused = sum(1 for c in data["cases"] if not c["ok"])
    print(f"SGLang {a.release}: {len(data['cases'])} cases, {refused} refused -> {a.out}")


if __name__ == "__main__":
    main()
