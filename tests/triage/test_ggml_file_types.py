"""The GGML-file loader of 2023 refused tensor types outside its list (llama.cpp@v0.1.77 vendored
in llama-cpp-python): a quantization format the build does not read, not an unknown error."""

from __future__ import annotations

from servepilot.triage import triage_text

# the loader's lines as llama.cpp of mid-2023 printed them: the file it opens, the refusal, and
# the load failure it becomes
LOG = """llama.cpp: loading model from models/llama-2-7b.ggmlv3.q6_K.bin
error loading model: unrecognized tensor type 14
llama_load_model_from_file: failed to load model
"""


def test_an_unrecognized_ggml_tensor_type_is_a_quantization_format_the_build_lacks():
    cause = triage_text(LOG).root_cause
    assert cause.category == "quantization_support"
    assert cause.signature == "llamacpp-ggml-file-type-unknown"
    assert cause.line == 2


def test_a_tensor_count_mismatch_is_still_the_architecture_not_the_format():
    log = LOG.replace("unrecognized tensor type 14",
                      "done_getting_tensors: wrong number of tensors; expected 292, got 291")
    cause = triage_text(log).root_cause
    assert cause.category == "unsupported_arch"
