"""Issue 13: the phase a process was in decides what an error means. A dtype with no kernel,
refused while the KV cache is allocated, is the KV cache dtype when it is the dtype the launch
asked for the KV cache. Built from the lines of a SGLang launch with --kv-cache-dtype fp4_e2m1
(ServerArgs dump, "Load weight end", the memory pool's torch.zeros), as committed in
https://github.com/jethac/dgx-spark-hijinks/blob/826c95417c1d078c062001cd2f33c5b898cf9265/
results/sglang_gemma3_27b_rung1_mixedkv_hybridswa_mf060_20260610TmanualJST_server.log
(shortened); the refusal is ATen's dispatch message (aten/src/ATen/Dispatch.h)."""

from __future__ import annotations

from servepilot.triage import triage_text


def _log(kv_dtype: str, refused: str) -> str:
    return (
        "[2026-06-10 02:18:35] server_args=ServerArgs(model_path='google/gemma-3-27b-it', "
        f"kv_cache_dtype='{kv_dtype}', mem_fraction_static=0.6)\n"
        "[2026-06-10 02:18:44] Load weight begin. avail mem=111.64 GB\n"
        "[2026-06-10 02:25:10] Load weight end. elapsed=386.02 s, avail mem=59.47 GB, "
        "mem usage=52.17 GB.\n"
        "[2026-06-10 02:25:10] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/py/sglang/srt/mem_cache/memory_pool.py", line 1129, in _create_buffers\n'
        "    torch.zeros(\n"
        f"NotImplementedError: \"fill_cuda\" not implemented for '{refused}'\n"
        "\n"
        "[2026-06-10 02:25:10] Received sigquit from a child process. It usually means the "
        "child failed.\n"
    )


def test_the_kv_dtype_refused_while_the_kv_cache_is_allocated_is_the_kv_cache_dtype():
    d = triage_text(_log("fp4_e2m1", "Float4_e2m1fn_x2"))
    assert d.root_cause.category == "kv_cache_dtype"
    assert d.root_cause.line == 7
    assert "fp4_e2m1" in d.root_cause.explanation


def test_another_dtype_refused_there_is_not_the_kv_cache_dtype():
    # the launch left the KV cache dtype to auto: nothing says the refused dtype is the KV's
    d = triage_text(_log("auto", "Float4_e2m1fn_x2"))
    assert d.root_cause.category != "kv_cache_dtype"
    d = triage_text(_log("fp8_e4m3", "Float4_e2m1fn_x2"))
    assert d.root_cause.category != "kv_cache_dtype"
