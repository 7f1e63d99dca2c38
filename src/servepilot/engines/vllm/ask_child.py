"""Run inside the engine's Python: ask vLLM's own code what it decides at start-up.

    python ask_child.py REQUEST.json ANSWERS.json

Standard library and vLLM only (servepilot need not be installed in the engine's
environment). REQUEST: {"cc": "9.0" or null for the real device, "gpu_name", "gpu_count",
"artifactory": true/false/null, "questions": [{"id", "model", "args": [...]}]}.

Per question: vLLM's own argument parser reads the `vllm serve` flags, then
EngineArgs.create_engine_config() builds the configuration (KV dtype resolution, model
verify hooks, the platform's check_and_update_config) and, under that configuration,
vllm's attention selector picks a backend with the arguments an attention layer passes.
No weights are loaded (load_format dummy, no model is built) and no tensor is put on a GPU.
With a faked capability, a CudaPlatform subclass reports it and CUDA allocations made at
import time go to the meta device.
"""

import contextlib
import inspect
import io
import json
import os
import sys
import time
import traceback

REQUEST = json.load(open(sys.argv[1]))
FAKE_CC = REQUEST.get("cc")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _fake_device(torch, major, minor, name, count):
    """torch.cuda answers for a device that is not there; CUDA tensors become meta tensors."""

    class Props:
        def __init__(self):
            self.major, self.minor, self.name = major, minor, name
            self.total_memory = 80 * 1024**3
            self.multi_processor_count = 132
            self.gcnArchName = ""
            self.uuid = "00000000-0000-0000-0000-000000000000"
            self.L2_cache_size = 50 * 1024**2

    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    torch.cuda.get_device_properties = lambda device=None: Props()
    torch.cuda.get_device_name = lambda device=None: name
    torch.cuda.device_count = lambda: count
    torch.cuda.current_device = lambda: 0
    torch.cuda.is_available = lambda: True

    def on_meta(factory):
        def make(*args, **kwargs):
            if "cuda" in str(kwargs.get("device", "")):
                kwargs["device"] = "meta"
            return factory(*args, **kwargs)
        return make

    for factory in ("zeros", "empty", "ones", "full", "tensor", "arange"):
        setattr(torch, factory, on_meta(getattr(torch, factory)))


def _install_platform(major, minor, name, count):
    import vllm.platforms as platforms
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability, Platform

    base = getattr(cuda, "NonNvmlCudaPlatform", None) or cuda.CudaPlatform

    class AskedCuda(base):
        @classmethod
        def get_device_capability(cls, device_id=0):
            return DeviceCapability(major=major, minor=minor)

        @classmethod
        def has_device_capability(cls, capability, device_id=0):
            return Platform.has_device_capability.__func__(cls, capability, device_id)

        @classmethod
        def get_device_name(cls, device_id=0):
            return name

        @classmethod
        def get_device_total_memory(cls, device_id=0):
            return 80 * 1024**3

        @classmethod
        def device_count(cls):
            return count

        @classmethod
        def is_fully_connected(cls, physical_device_ids):
            return True

        @classmethod
        def log_warnings(cls):
            pass

    platforms._current_platform = AskedCuda()
    return platforms._current_platform


def _set_artifactory(value):
    """Answer as a host with (True) or without (False) NVIDIA's cubin artifactory; None: ask."""
    if value is None:
        return
    try:
        import vllm.utils.flashinfer as fi
    except ImportError:
        return
    for name in ("has_nvidia_artifactory", "supports_trtllm_attention"):
        fn = getattr(fi, name, None)
        if hasattr(fn, "cache_clear"):
            fn.cache_clear()
    fi.has_nvidia_artifactory = lambda: bool(value)
    if not value and hasattr(fi, "has_flashinfer_cubin"):
        fi.has_flashinfer_cubin = lambda: False


def _parser():
    from vllm.engine.arg_utils import EngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    return EngineArgs, EngineArgs.add_cli_args(FlexibleArgumentParser(prog="vllm serve"))


def _engine_args(model, args):
    """vLLM's own parser on the serve flags; flags of the server front end are left aside."""
    EngineArgs, parser = _parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            ns, unknown = parser.parse_known_args(["--model", model, *args])
        except SystemExit:
            last = (err.getvalue().strip().splitlines() or ["(no message)"])[-1]
            raise ValueError(f"vLLM's argument parser refused the flags: {last}"[:600]) from None
    engine_args = EngineArgs.from_cli_args(ns)
    # the answer must not need weights, a tokenizer or CUDA graphs
    engine_args.skip_tokenizer_init = True
    engine_args.load_format = "dummy"
    engine_args.enforce_eager = True
    return engine_args, unknown


def _fake_device_count(count):
    """vLLM counts GPUs through CUDA (cuda_device_count_stateless) for -tp/-pp checks."""
    for name, module in list(sys.modules.items()):
        if name.startswith("vllm") and hasattr(module, "cuda_device_count_stateless"):
            module.cuda_device_count_stateless = lambda: count


def _environment():
    """What this host would give FlashInfer: its cubin package and NVIDIA's artifactory."""
    try:
        import vllm.utils.flashinfer as fi
    except ImportError:
        return {}
    found = {}
    for key, name in (("flashinfer_cubin", "has_flashinfer_cubin"), ("nvidia_artifactory", "has_nvidia_artifactory")):
        fn = getattr(fi, name, None)
        if callable(fn):
            try:
                found[key] = bool(fn())
            except Exception:  # noqa: BLE001
                found[key] = None
    return found


def _clear_selector_caches():
    from vllm.platforms import cuda
    from vllm.v1.attention import selector

    for name in dir(selector):
        fn = getattr(selector, name)
        if callable(fn) and hasattr(fn, "cache_clear"):
            fn.cache_clear()
    if hasattr(getattr(cuda, "_get_backend_priorities", None), "cache_clear"):
        cuda._get_backend_priorities.cache_clear()


def _backend_name(item):
    for part in item if isinstance(item, tuple) else (item,):
        if hasattr(part, "name"):
            return part.name
    return str(item)


def _candidates(platform, head_size, dtype, kv, block, use_mla, has_sink, use_sparse, num_heads):
    """Every backend the platform tried, with its rejection reasons."""
    from vllm.v1.attention.selector import AttentionSelectorConfig

    fields = AttentionSelectorConfig._fields
    values = dict(head_size=head_size, dtype=dtype, kv_cache_dtype=kv, block_size=block,
                  use_mla=use_mla, has_sink=has_sink, use_sparse=use_sparse)
    config = AttentionSelectorConfig(**{k: v for k, v in values.items() if k in fields})
    method = platform.get_valid_backends
    kwargs = {"device_capability": platform.get_device_capability(), "attn_selector_config": config}
    if "num_heads" in inspect.signature(method).parameters:
        kwargs["num_heads"] = num_heads
    valid, invalid = method(**kwargs)
    rejected = {}
    for backend, reasons in invalid.items():
        if isinstance(reasons, tuple) and reasons and isinstance(reasons[0], int):
            reasons = reasons[1]
        rejected[_backend_name(backend)] = [str(r) for r in reasons]
    return [_backend_name(v) for v in valid], rejected


def _kv_after_selection(backend_cls, kv, use_sparse):
    """The KV dtype the MLA layer stores after selection (the engine's own function when it has one)."""
    if not use_sparse:
        return kv
    try:
        from vllm.model_executor.layers.attention import mla_attention

        canonical = getattr(mla_attention, "_canonicalize_sparse_mla_kv_cache_dtype", None)
    except ImportError:
        canonical = None
    if canonical is not None:
        return canonical(backend_cls, kv)
    # 0.18-0.23 MLAAttention.__init__: FLASHMLA_SPARSE stores fp8* as fp8_ds_mla
    if backend_cls.get_name() == "FLASHMLA_SPARSE" and kv.startswith("fp8"):
        return "fp8_ds_mla"
    return kv


def _block_after_selection(platform, backend_cls, cache_config, model_config):
    """update_block_size_for_backend (0.18+): the backend's preferred size unless --block-size."""
    if not callable(getattr(type(platform), "update_block_size_for_backend", None)):
        return cache_config.block_size
    if getattr(cache_config, "user_specified_block_size", False):
        return cache_config.block_size
    from vllm.config.cache import CacheConfig

    if getattr(model_config, "is_hybrid", False):
        return CacheConfig.DEFAULT_BLOCK_SIZE
    return backend_cls.get_preferred_block_size(CacheConfig.DEFAULT_BLOCK_SIZE)


def ask(question, platform, selector, set_config):
    answer = {"id": question.get("id")}
    try:
        engine_args, unknown = _engine_args(question["model"], question.get("args", []))
    except Exception as e:  # noqa: BLE001 - the engine's refusal is the answer
        return dict(answer, stage="arguments", ok=False, error=f"{type(e).__name__}: {e}"[:2000])
    if unknown:
        answer["ignored_flags"] = unknown
    _clear_selector_caches()
    if FAKE_CC:
        _fake_device_count(int(REQUEST.get("gpu_count") or 1))
    try:
        config = engine_args.create_engine_config()
    except Exception as e:  # noqa: BLE001
        return dict(answer, stage="config", ok=False, error=f"{type(e).__name__}: {e}"[:2000])
    mc, cc = config.model_config, config.cache_config
    hf = mc.hf_text_config
    use_mla = bool(mc.use_mla)
    use_sparse = use_mla and hasattr(hf, "index_topk")
    head_size = (hf.kv_lora_rank + hf.qk_rope_head_dim) if use_mla else mc.get_head_size()
    has_sink = getattr(hf, "model_type", "") == "gpt_oss"  # gpt-oss passes learned sinks
    kv = cc.cache_dtype
    num_heads = hf.num_attention_heads if use_mla else None
    forced = getattr(getattr(config, "attention_config", None), "backend", None)
    answer.update(cache_dtype_after_config=kv, block_size_after_config=cc.block_size, use_mla=use_mla,
                  use_sparse=use_sparse, has_sink=has_sink, head_size=head_size,
                  model_dtype=str(mc.dtype).replace("torch.", ""),
                  forced_backend=getattr(forced, "name", None))
    params = inspect.signature(selector.get_attn_backend).parameters
    kwargs = dict(head_size=head_size, dtype=mc.dtype, kv_cache_dtype=kv, block_size=cc.block_size,
                  use_mla=use_mla, has_sink=has_sink, use_sparse=use_sparse, num_heads=num_heads)
    kwargs = {k: v for k, v in kwargs.items() if k in params}
    with set_config(config):
        try:
            given_block = cc.block_size if (getattr(cc, "user_specified_block_size", False)
                                            or "block_size" in params) else None
            answer["candidates_valid"], answer["candidates_invalid"] = _candidates(
                platform, head_size, mc.dtype, kv, given_block, use_mla, has_sink, use_sparse, num_heads)
        except Exception as e:  # noqa: BLE001 - informational only
            answer["candidates_error"] = f"{type(e).__name__}: {e}"[:500]
        try:
            backend = selector.get_attn_backend(**kwargs)
        except Exception as e:  # noqa: BLE001
            return dict(answer, stage="select", ok=False, error=f"{type(e).__name__}: {e}"[:3000])
        answer.update(stage="done", ok=True, backend=backend.get_name(),
                      kv_cache_dtype_final=_kv_after_selection(backend, kv, use_sparse),
                      block_size_final=_block_after_selection(platform, backend, cc, mc))
    return answer


def main():
    started = time.monotonic()
    out = {"questions": len(REQUEST["questions"]), "answers": []}
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink):
            import torch

            if FAKE_CC:
                major, minor = (int(x) for x in FAKE_CC.split("."))
                name, count = REQUEST.get("gpu_name") or "NVIDIA GPU", int(REQUEST.get("gpu_count") or 1)
                _fake_device(torch, major, minor, name, count)
            import vllm

            out["engine_version"] = vllm.__version__
            if FAKE_CC:
                platform = _install_platform(major, minor, name, count)
            else:
                from vllm.platforms import current_platform as platform
            out["device"] = {"faked": bool(FAKE_CC), "name": platform.get_device_name(),
                             "capability": "{}.{}".format(*tuple(platform.get_device_capability()))}
            _set_artifactory(REQUEST.get("artifactory"))
            from vllm.v1.attention import selector

            try:
                from vllm.config import set_current_vllm_config
            except ImportError:
                from vllm.config.vllm import set_current_vllm_config
            out["import_s"] = round(time.monotonic() - started, 2)
            for question in REQUEST["questions"]:
                t = time.monotonic()
                try:
                    answer = ask(question, platform, selector, set_current_vllm_config)
                except Exception as e:  # noqa: BLE001 - one broken question does not end the others
                    answer = {"id": question.get("id"), "stage": "harness", "ok": False,
                              "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-1500:]}
                answer["secs"] = round(time.monotonic() - t, 2)
                out["answers"].append(answer)
            out["environment"] = _environment()
    except BaseException as e:  # noqa: BLE001 - reported to the parent, never raised
        out["error"] = f"{type(e).__name__}: {e}"[:2000]
        out["traceback"] = traceback.format_exc()[-2000:]
    out["wall_s"] = round(time.monotonic() - started, 2)
    with open(sys.argv[2], "w") as f:
        json.dump(out, f, default=str)


if __name__ == "__main__":
    main()
