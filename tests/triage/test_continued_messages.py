"""Issue 13: exception messages printed over several lines, and lines that point at another.

Triton's CompilationError prints "at LINE:COL:", the kernel's source, a caret, then the inner
error (triton/compiler/errors.py CompilationError._format_message@v3.8.0; code_generator.py
raises it with repr(e)). Its source lines are kernel code and its inner error says what failed.
torch_npu's "The Inner error is reported as above" and pydantic's "N validation error for X"
name no cause themselves; the lines of their message that follow do.
Each log is built from lines the programs print (the source of each is said beside it).
"""

from __future__ import annotations

from servepilot.triage import triage_text
from servepilot.triage.events import Assembler

_FP8E4NV = (
    "ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes "
    "are ('fp8e4b15', 'fp8e5')\")"  # triton/language/core.py@v3.8.0 dtype.to_ir
)
_TRITON_FRAMES = (
    '  File "/py/triton/runtime/jit.py", line 720, in run\n'
    "    kernel = self._do_compile(key, signature, device, constexprs, options, attrs, warmup)\n"
    '  File "/py/triton/compiler/compiler.py", line 80, in make_ir\n'
    "    return ast_to_ttir(self.fn, self, context=context, options=options)\n"
)

# SGLang's Triton decode attention compiled for an FP8 (e4m3) KV cache on an Ampere GPU
# (sglang/srt/layers/attention/triton_ops/decode_attention.py@v0.5.10.post1: line 698 calls
# _decode_grouped_att_m_fwd, line 478 launches _fwd_grouped_kernel_stage1), then the
# launcher's notice (sglang/srt/entrypoints/engine.py "Received sigquit from a child process").
SGLANG_DECODE_FP8 = (
    "Traceback (most recent call last):\n"
    '  File "/py/sglang/srt/layers/attention/triton_ops/decode_attention.py", line 698, in '
    "decode_attention_fwd_grouped\n"
    "    _decode_grouped_att_m_fwd(\n"
    '  File "/py/sglang/srt/layers/attention/triton_ops/decode_attention.py", line 478, in '
    "_decode_grouped_att_m_fwd\n"
    "    _fwd_grouped_kernel_stage1[grid](\n"
    + _TRITON_FRAMES
    + "triton.compiler.errors.CompilationError: at 1:0:\n"
    "def _fwd_grouped_kernel_stage1(\n"
    "^\n"
    + _FP8E4NV + "\n"
    "\n"
    "[2026-06-10 06:37:50] Received sigquit from a child process. It usually means the child failed.\n"
)

# vLLM's FP8 weight GEMM in Triton (vllm/model_executor/layers/quantization/compressed_tensors/
# triton_scaled_mm.py@v0.18.0: line 200 launches scaled_mm_kernel, line 97 its tl.dot): the
# same Triton refusal, for FP8 weights; the source excerpt shows the kernel up to the caret.
VLLM_SCALED_MM_FP8 = (
    "Traceback (most recent call last):\n"
    '  File "/py/vllm/model_executor/layers/quantization/compressed_tensors/triton_scaled_mm.py",'
    " line 200, in triton_scaled_mm\n"
    "    scaled_mm_kernel[grid](\n"
    + _TRITON_FRAMES
    + "triton.compiler.errors.CompilationError: at 79:22:\n"
    "        a = tl.load(a_ptrs, mask=masks_a)\n"
    "        # failed loads are masked, not errors\n"
    "        b = tl.load(b_ptrs, mask=masks_b)\n"
    "        accumulator = tl.dot(a, b, accumulator, out_dtype=accumulator_dtype)\n"
    "                      ^\n"
    + _FP8E4NV + "\n"
)


def _events(text: str) -> list:
    asm = Assembler()
    for number, line in enumerate(text.splitlines(), 1):
        asm.feed(number, line)
    asm.finish()
    return asm.events


def test_the_inner_error_of_a_compilation_error_is_raised_from_it_with_its_frames():
    events = _events(SGLANG_DECODE_FP8)
    compile_error = next(e for e in events if e.exc_type == "triton.compiler.errors.CompilationError")
    inner = next(e for e in events if e.exc_type == "ValueError")
    assert (compile_error.line_no, inner.line_no) == (10, 13)
    assert inner.wraps == 10 and inner.chained
    assert any("decode_attention.py" in f for f in inner.lines)  # the frames it was raised in
    # the kernel's source and the caret are part of the message, not lines of their own
    assert not [e for e in events if e.line_no in (11, 12)]


def test_fp8e4nv_in_the_decode_attention_kernel_is_the_kv_cache_dtype():
    d = triage_text(SGLANG_DECODE_FP8)
    assert d.root_cause.signature == "triton-fp8e4nv-arch"
    assert d.root_cause.category == "kv_cache_dtype"
    assert d.root_cause.line == 13


def test_fp8e4nv_in_a_weight_gemm_kernel_stays_a_quantization_limit():
    d = triage_text(VLLM_SCALED_MM_FP8)
    assert d.root_cause.category == "quantization_support"
    assert d.root_cause.line == 14
    # the source lines (one says "failed") are kernel code, not errors of the log
    events = _events(VLLM_SCALED_MM_FP8)
    assert not [e for e in events if 9 <= e.line_no <= 13]


# A Triton kernel whose branches give one variable two dtypes (Triton's code generator refuses
# it with an AssertionError in repr form), with the launcher's notice after it: the log as
# committed in https://github.com/mattbucci/2x-3090-GA102-300-A1-sglang-inference/blob/
# a9d1f7f0f6e6a760235ac190116e6486782b0030/benchmarks/sprint-2026-06-kv-decode/
# B4-ngram-qwen36-dense/ngram.bootfail.log (lines shortened).
CONV1D_BRANCH_DTYPES = (
    "Traceback (most recent call last):\n"
    + _TRITON_FRAMES
    + "triton.compiler.errors.CompilationError: at 322:24:\n"
    "                    elif KERNEL_WIDTH == 4:\n"
    "                        if _idx_token == 0:\n"
    "                            matrix_x = col2\n"
    "                        elif _idx_token == -1:\n"
    "                        ^\n"
    "AssertionError('initial value for `matrix_x` is of type fp16[constexpr[256]], but the then "
    "block redefines it as bf16[constexpr[256]]')\n"
    "\n"
    "[2026-06-10 08:50:47] Received sigquit from a child process. "
    "It usually means the child failed.\n"
)


def test_an_inner_error_no_signature_knows_still_says_what_the_compilation_error_failed_on():
    # "at 322:24:" names only a place in the kernel: the inner error is the report, known or not
    d = triage_text(CONV1D_BRANCH_DTYPES)
    assert d.root_cause.line == 12
    assert d.root_cause.exception == "AssertionError"
    assert any(o.line == 6 for o in d.other_errors)  # the CompilationError is still listed


def test_a_compilation_error_without_a_caret_leaves_the_lines_after_it_alone():
    # a message that merely starts the same way and then goes on with ordinary log lines
    text = (
        "Traceback (most recent call last):\n"
        + _TRITON_FRAMES
        + "triton.compiler.errors.CompilationError: at 1:0:\n"
        + "".join(f"line {i} of something\n" for i in range(13))
        + "RuntimeError: CUDA error: out of memory\n"
    )
    events = _events(text)
    oom = next(e for e in events if e.exc_type == "RuntimeError")
    assert oom.line_no == 20 and oom.wraps is None


# torch_npu's report of an operator that failed asynchronously, as a vLLM-Ascend worker logs
# its traceback (vllm/v1/executor/multiproc_executor.py worker_main, each line at ERROR): the
# exception points at the inner error; its notes, torch_npu's own code line and CANN's error
# message follow in the same message (https://github.com/vllm-project/vllm-ascend/issues/2260,
# /issues/1383: the EZ3002 line is CANN's graph engine finding no TransData kernel on a 310P).
_W = "(VllmWorker rank=0 pid=13053) ERROR 08-01 03:42:22 [multiproc_executor.py:594] "
NPU_POINTER = (
    f'{_W}  File "/py/torch/_ops.py", line 1116, in __call__\n'
    f"{_W}    return self._op(*args, **(kwargs or {{}}))\n"
    f"{_W}RuntimeError: The Inner error is reported as above. The process exits for this inner "
    "error, and the current working operator name is Identity.\n"
    f"{_W}Since the operator is called asynchronously, the stacktrace may be inaccurate. If you "
    "want to get the accurate stacktrace, please set the environment variable "
    "ASCEND_LAUNCH_BLOCKING=1.\n"
    f"{_W}Note: ASCEND_LAUNCH_BLOCKING=1 will force ops to run in synchronous mode, resulting in "
    "performance degradation. Please unset ASCEND_LAUNCH_BLOCKING in time after debugging.\n"
    f"{_W}[ERROR] 2025-06-23-10:51:59 (PID:603, Device:0, RankID:-1) ERR00100 PTA call acl api "
    "failed.\n"
)
_CANN_EZ3002 = (
    f"{_W}EZ3002: [PID: 603] 2025-06-23-10:51:59.636.525 Optype [TransData] of Ops kernel "
    "[AIcoreEngine] is unsupported. Reason: [tbe-custom]:op type TransData is not found in this "
    "op store.\n"
)


def test_torch_npus_pointer_hands_the_decision_to_the_cann_error_it_names():
    d = triage_text(NPU_POINTER + _CANN_EZ3002)
    assert d.root_cause.line == 7
    assert d.root_cause.category == "cuda_driver_arch"
    assert d.root_cause.exception == "RuntimeError"
    assert "operator name is Identity" in d.root_cause.excerpt  # the pointer stays in view
    assert not d.other_errors  # its notes are its message, not errors of their own


def test_torch_npus_pointer_without_the_cann_message_is_reported_where_it_was_printed():
    # the paste was cut before CANN's message, then the process's next line
    d = triage_text(NPU_POINTER + f"{_W}Worker exiting\n")
    assert d.root_cause.line == 3
    assert d.root_cause.category == "other"


def test_the_same_report_logged_without_its_type_rests_on_the_cann_line():
    # vLLM's V0 engine logs str(e) at ERROR (vllm/engine/multiprocessing/engine.py), so the
    # pointer opens a run of error lines and CANN's line in it says what failed
    text = "".join(
        line.replace(_W, "ERROR 06-23 10:51:59 [engine.py:458] ").replace("RuntimeError: ", "")
        for line in (NPU_POINTER + _CANN_EZ3002).splitlines(keepends=True)[2:]
    )
    d = triage_text(text)
    assert d.root_cause.line == 5
    assert d.root_cause.category == "cuda_driver_arch"


# vLLM's config classes are pydantic dataclasses: a refusal in ModelConfig comes as pydantic's
# ValidationError, whose header names only the class; its "Value error, <msg> [type=...]" line
# carries vLLM's message (pydantic_core ValidationError.__str__, pydantic 2.12; the path
# vllm/engine/arg_utils.py create_model_config -> ModelConfig, vllm/config/model.py@v0.18.0).
_P = "(APIServer pid=7) "
_VALIDATION = (
    f"{_P}Traceback (most recent call last):\n"
    f'{_P}  File "/py/vllm/engine/arg_utils.py", line 1183, in create_model_config\n'
    f"{_P}    return ModelConfig(\n"
    f'{_P}  File "/py/pydantic/_internal/_dataclasses.py", line 121, in __init__\n'
    f"{_P}    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)\n"
    f"{_P}pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
    f"{_P}  Value error, {{}} [type=value_error, input_value=ArgsKwargs((), {{{{'model': 'm'}}}}), "
    "input_type=ArgsKwargs]\n"
    f"{_P}    For further information visit https://errors.pydantic.dev/2.12/v/value_error\n"
)


def test_a_validation_errors_message_line_decides_when_its_words_name_the_cause():
    # vllm/config/model.py@v0.18.0 _verify_quantization, for a deprecated method
    d = triage_text(_VALIDATION.format(
        "The quantization method marlin is deprecated and will be removed in future versions of "
        "vLLM. To bypass, set `--allow-deprecated-quantization`."
    ))
    assert d.root_cause.line == 7
    assert d.root_cause.category == "quantization_support"
    assert d.root_cause.exception == "pydantic_core._pydantic_core.ValidationError"


def test_a_validation_error_whose_message_names_nothing_is_reported_at_its_header():
    # json.loads on an empty config file, wrapped by ModelConfig's validation
    d = triage_text(_VALIDATION.format("Expecting value: line 1 column 1 (char 0)"))
    assert d.root_cause.line == 6
    assert d.root_cause.category == "other"
