"""The stored vLLM golden answers, and the knowledge-based resolver's answers to the same cases.

The deployments are built the way `check` builds them (servepilot.deployment.build_deployment
parses the `vllm serve` command line and inspects the config-only model directory), then
resolved by engines/vllm/resolve.py. Building one deployment per model and flags and swapping
the GPU keeps the 5,400 cases to seconds; a separate test runs `check --json` itself on a
sample and asserts it says the same.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "vllm_golden"

_spec = importlib.util.spec_from_file_location("vllm_golden_tool", REPO / "tools" / "vllm_golden.py")
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def stored_files() -> list[Path]:
    return sorted(DATA.glob("vllm-*.jsonl.gz"))


@functools.cache
def models_root(tmp: str) -> Path:
    return tool.write_models(tool.load_grid(), Path(tmp))


def command(case: dict, root: Path) -> list[str]:
    return ["vllm", "serve", str(root / case["model"])] + tool.engine_args(case)


class Resolver:
    """Resolves grid cases for one release, reusing a deployment across GPUs."""

    def __init__(self, root: Path, version: str, *, artifactory: bool = True):
        self.root, self.version, self.artifactory = root, version, artifactory
        self._deps: dict = {}
        self._clusters: dict = {}

    def deployment(self, case: dict):
        from servepilot.deployment import build_deployment
        from servepilot.hardware.catalog import cluster_from_flag

        key = (case["model"], case["dtype"], case["kv_cache_dtype"], case["block_size"])
        if key not in self._deps:
            self._deps[key] = build_deployment(command(case, self.root), gpu=case["gpu"], engine_version=self.version)
        if case["gpu"] not in self._clusters:
            self._clusters[case["gpu"]] = cluster_from_flag(case["gpu"])
        dep = self._deps[key]
        # the offline answers were recorded with NVIDIA's cubin artifactory unreachable
        extra = dict(dep.extra, nvidia_artifactory=False) if not self.artifactory else dep.extra
        return dataclasses.replace(dep, cluster=self._clusters[case["gpu"]], extra=extra)

    def resolve(self, case: dict):
        from servepilot.engines.vllm.resolve import resolve

        return resolve(self.deployment(case))


def refuses(res) -> bool:
    """Whether the knowledge says vLLM stops at configuration or attention selection."""
    return (not res.kv_valid) or res.fails or (res.quant is not None and not res.quant.supported)


def known_rows() -> list:
    from servepilot.engines import knowledge as kb

    return list(kb.load_file("vllm", "attention").get("known_differences", []))


def known_difference(answer: dict, case: dict, aspect: str, release: str):
    """The row of attention.yaml known_differences that explains this disagreement, if any."""
    from servepilot.engines import knowledge as kb

    family = int(case["cc"].split(".")[0]) * 10
    engine_kv = answer.get("kv_cache_dtype_final") or answer.get("cache_dtype_after_config") or "auto"
    for row in kb.load_file("vllm", "attention").get("known_differences", []):
        if row["aspect"] != aspect or kb.row_for([row], release) is None:
            continue
        when = row["when"]
        if ("gpu_family" in when and when["gpu_family"] != family
                or "sparse" in when and when["sparse"] != bool(answer.get("use_sparse"))
                or "backend" in when and when["backend"] != answer.get("backend")
                or "engine_kv" in when and engine_kv not in when["engine_kv"]):
            continue
        return row
    return None


def judge(answer: dict, res) -> dict[str, bool]:
    """Agreement per aspect: outcome (backend or refusal), kv (KV dtype), block (block size)."""
    out = {}
    if answer.get("stage") == "config":
        out["outcome"] = refuses(res)
    elif not answer.get("ok"):
        out["outcome"] = res.attention_backend is None and refuses(res)
    else:
        out["outcome"] = answer.get("backend") == res.attention_backend
    if answer.get("stage") in ("done", "select"):
        engine_kv = answer.get("kv_cache_dtype_final") or answer.get("cache_dtype_after_config")
        out["kv"] = (engine_kv or "auto") == (res.kv_cache_dtype or "auto")
    if answer.get("ok") and res.attention_backend:
        out["block"] = answer.get("block_size_final") == res.block_size
    return out
