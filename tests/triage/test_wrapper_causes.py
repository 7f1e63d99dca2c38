"""Issue 13 (branch wrapcause): a wrapper's words carry or follow the cause. ollama retells its
llama.cpp runner's last error line, llama-cpp-python asserts on a model llama.cpp failed to
load, vLLM 0.5's worker loop quotes the method's exception, llama.cpp's template engine ends
its errors with the template's row and column. Each log is built from lines those programs
print (the source is said beside each); a neighbour shows the mechanism deciding the other way.
"""

from __future__ import annotations

from servepilot.triage import triage_text


def _cause(text: str):
    return triage_text(text).root_cause


# ollama llm/server.go: a runner's last error line that holds "unknown model" is replaced by this
# sentence, then reported as "llama runner process has terminated: <LastErrMsg>"
def test_ollamas_version_refusal_is_the_runners_unknown_architecture():
    rc = _cause(
        "Error: llama runner process has terminated: this model is not supported by your "
        "version of Ollama. You may need to upgrade\n"
    )
    assert rc.category == "unsupported_arch"
    assert rc.signature == "ollama-model-unknown-to-version"


def test_ollamas_bare_exit_status_stays_unknown():
    # the same wrapper with only the exit status: nothing says why, so nothing is guessed
    rc = _cause("Error: llama runner process has terminated: exit status 2\n")
    assert rc.category == "other"


# llama.cpp src/llama.cpp@llama-cpp-python-0.3.2: llm_load_hparams and the per-architecture graph
# builders assert the model's hyper-parameters (GGML_ASSERT(%s) failed, ggml.h)
def test_a_hyper_parameter_assert_retold_by_ollama_is_an_unknown_model_variant():
    rc = _cause(
        "Error: llama runner process has terminated: GGML_ASSERT(hparams.n_swa > 0) failed\n"
    )
    assert rc.category == "unsupported_arch"
    assert rc.signature == "llamacpp-hparams-assert"


def test_the_older_assert_format_is_read_too():
    # llama-cpp-python 0.2.20's ggml.h: fprintf(stderr, "GGML_ASSERT: %s:%d: %s\n", ...)
    rc = _cause("GGML_ASSERT: llama.cpp:4310: hparams.n_expert <= LLAMA_MAX_EXPERTS\n")
    assert rc.category == "unsupported_arch"


def test_the_kv_cache_type_check_on_the_head_size_is_the_cache_type():
    # llama_new_context_with_model: the KV type's block size must divide the head size
    rc = _cause(
        "llama.cpp:19586: GGML_ASSERT(hparams.n_embd_head_k % ggml_blck_size(type_k) == 0) "
        "failed\n"
    )
    assert rc.category == "kv_cache_dtype"


def test_an_assert_on_a_tensor_is_not_a_model_variant():
    rc = _cause("ggml.c:12345: GGML_ASSERT(i01 >= 0 && i01 < ne01) failed\n")
    assert rc.category != "unsupported_arch"


# llama-vocab.cpp@llama-cpp-python-0.3.36 (load) under llama_model_load's wrapper, then
# llama-cpp-python 0.2.x asserting on the model it did not get (llama_cpp/llama.py@0.2.20)
VOCAB_THEN_ASSERT = (
    "llama_model_load: error loading model: error loading model vocabulary: cannot find "
    "tokenizer merges in model file\n"
    "llama_load_model_from_file: failed to load model\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/llama_cpp/llama.py", line 340, in __init__\n'
    "    assert self.model is not None\n"
    "AssertionError\n"
)


def test_the_vocabulary_refusal_before_the_assert_is_the_cause():
    rc = _cause(VOCAB_THEN_ASSERT)
    assert rc.category == "tokenizer_template"
    assert rc.line == 1


def test_the_same_wrapper_around_an_unknown_architecture_is_the_architecture():
    rc = _cause(VOCAB_THEN_ASSERT.replace(
        "error loading model vocabulary: cannot find tokenizer merges in model file",
        "error loading model architecture: unknown model architecture: 'qwen3moe'",
    ))
    assert rc.category == "unsupported_arch"
    assert rc.line == 1


def test_the_models_assert_echoes_an_unknown_load_error_before_it():
    # nobody knows the load error's words: it is still the error, not the assert after it
    rc = _cause(VOCAB_THEN_ASSERT.replace(
        "error loading model vocabulary: cannot find tokenizer merges in model file",
        "a message no signature knows",
    ))
    assert rc.category == "other"
    assert rc.line == 1


def test_another_bare_assert_stays_the_error():
    rc = _cause(
        "Traceback (most recent call last):\n"
        '  File "/srv/app/model.py", line 34, in __init__\n'
        "    assert self.total_num_heads % tp_size == 0\n"
        "AssertionError\n"
    )
    assert rc.line == 4


# minja.hpp@llama-cpp-python-0.3.9: error_location_suffix writes " at row R, column C:"
MINJA_ABORT = (
    "terminate called after throwing an instance of 'std::runtime_error'\n"
    "  what():  Expected block keyword at row 152, column 17:\n"
    "        {%- else %}\n"
    "            {%- break %}\n"
    "                ^\n"
)


def test_minjas_row_and_column_error_is_the_chat_template():
    rc = _cause(MINJA_ABORT)
    assert rc.category == "tokenizer_template"
    assert rc.signature == "minja-template-error"


def test_a_template_llama_cpp_replaced_by_chatml_is_no_failure():
    # common/chat.cpp@llama-cpp-python-0.3.9: the parse error is caught and chatml is used
    d = triage_text(
        "common_chat_templates_init: failed to parse chat template (defaulting to chatml): "
        "Expected block keyword at row 1, column 5:\n"
        "main: server is listening on http://127.0.0.1:8080 - starting the main loop\n"
    )
    assert d.root_cause is None


# jinja2/exceptions.py@3.1.6, printed without the module prefix
def test_a_bare_jinja2_syntax_error_is_the_chat_template():
    rc = _cause("TemplateSyntaxError: Encountered unknown tag 'generation'.\n")
    assert rc.category == "tokenizer_template"


def test_a_python_syntax_error_is_not_a_template():
    rc = _cause("SyntaxError: invalid syntax\n")
    assert rc.category != "tokenizer_template"


# vllm/executor/multiproc_worker_utils.py@v0.5.5: "Exception in worker %s while processing
# method %s: %s, %s"; vllm/attention/backends/torch_sdpa.py@v0.5.5 raises on soft-capping
def test_a_worker_quoting_the_soft_cap_refusal_is_the_attention_backend():
    rc = _cause(
        "(VllmWorkerProcess pid=143) INFO 09-20 08:05:48 selector.py:128] Using Torch SDPA "
        "backend.\n"
        "(VllmWorkerProcess pid=143) ERROR 09-20 08:05:48 multiproc_worker_utils.py:226] "
        "Exception in worker VllmWorkerProcess while processing method load_model: Torch SPDA "
        "does not support logits soft cap., Traceback (most recent call last):\n"
    )
    assert rc.category == "attention_backend"
    assert rc.signature == "attention-softcap-refused"


def test_a_worker_quoting_an_unknown_error_stays_unknown():
    rc = _cause(
        "(VllmWorkerProcess pid=143) ERROR 09-20 08:05:48 multiproc_worker_utils.py:226] "
        "Exception in worker VllmWorkerProcess while processing method load_model: "
        "something nobody has seen, Traceback (most recent call last):\n"
    )
    assert rc.category == "other"


def test_the_later_soft_cap_warning_is_no_failure():
    # torch_sdpa.py@v0.6.6 only warns; the server then starts
    d = triage_text(
        "WARNING 09-20 08:05:48 torch_sdpa.py:398] Torch SPDA does not support logits soft cap. "
        "Outputs may be slightly off.\n"
        "INFO:     Application startup complete.\n"
    )
    assert d.root_cause is None


# Wrappers nobody has shown us: any program loading a model through llama.cpp says it failed in
# its own words and often quotes the reason after a colon (node-llama-cpp's "Failed to load
# model", LocalAI's "failed to load model with internal loader: ...", llama.cpp's own
# common_init_from_params "failed to load model '%s'")
def test_a_reason_quoted_by_an_unknown_wrapper_is_matched_again():
    rc = _cause(
        "ERR [some-frontend] Failed loading model, trying with fallback 'cpu', error: failed to "
        "load model with internal loader: could not load model: error loading model: error "
        "loading model vocabulary: unknown pre-tokenizer type: 'kimi-k2'\n"
    )
    assert rc.category == "tokenizer_template"
    assert rc.signature == "llamacpp-vocab-refused"


def test_a_wrapper_quoting_only_a_path_says_nothing():
    rc = _cause("Failed to load model: /models/x.gguf\n")
    assert rc.category == "other"


def test_a_json_record_naming_the_model_is_not_a_quoted_reason():
    # llama.cpp's old server logged {"message":"unable to load model","model":"..."}: the
    # model's file name after the key is no reason, so the line stays a plain echo
    from servepilot.triage.signatures import Matcher, load_signatures

    line = '{"level":"ERROR","message":"unable to load model","model":"models/7B/m.gguf"}'
    m = Matcher(load_signatures()).match(line)
    assert m is None or m.signature.id != "model-load-wrapper-echo"


def test_a_wrappers_unknown_reason_never_outranks_the_engines_line_before_it():
    rc = _cause(
        "llama_model_load: error loading model: error loading model architecture: unknown "
        "model architecture: 'qwen3moe'\n"
        "Failed to load model: the runner stopped while reading the file\n"
    )
    assert rc.category == "unsupported_arch"
    assert rc.line == 1


# vllm/attention/backends/flashinfer.py@v0.5.5 and pallas.py@v0.5.5 refuse sliding window by
# their own words; neuron_model_runner.py@v0.5.5 only warns; qwen2.py@v0.5.5 refuses a config
def test_a_backend_refusing_sliding_window_is_the_attention_backend():
    rc = _cause("ValueError: Sliding window is not supported in FlashInfer.\n")
    assert rc.category == "attention_backend"
    assert rc.signature == "attention-sliding-window-refused"


def test_neurons_sliding_window_warning_is_no_failure():
    d = triage_text(
        "WARNING 01-02 10:00:00 neuron_model_runner.py:64] Sliding window is not supported on "
        "Neuron. The model will run without sliding window.\n"
        "INFO:     Application startup complete.\n"
    )
    assert d.root_cause is None


def test_a_models_partial_sliding_window_is_not_a_backend_refusal():
    rc = _cause(
        "ValueError: Sliding window for some but all layers is not supported. This model uses "
        "sliding window but `max_window_layers` = 28 is less than `num_hidden_layers` = 28.\n"
    )
    assert rc.category != "attention_backend"
