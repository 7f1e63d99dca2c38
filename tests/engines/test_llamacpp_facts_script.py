"""tools/llamacpp_build_facts.py: its readers of llama.cpp's tables, on source text in the
shapes llama.cpp has written them (the script itself runs offline, not in CI)."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "llamacpp_build_facts.py"


def _script():
    spec = importlib.util.spec_from_file_location("llamacpp_build_facts", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ARCH_CPP = """
static const std::map<llm_arch, const char *> LLM_ARCH_NAMES = {
    { LLM_ARCH_LLAMA,            "llama"            },
    { LLM_ARCH_QWEN3MOE,         "qwen3moe"         },
//  { LLM_ARCH_OLD,              "old-commented"    },
    { LLM_ARCH_UNKNOWN,          "(unknown)"        },
};
static const std::map<llm_kv, const char *> LLM_KV_NAMES = { { LLM_KV_X, "x" } };
"""

VOCAB_CPP = """
        if (type == LLAMA_VOCAB_TYPE_BPE) {
            if (tokenizer_pre.empty()) {
            } else if (tokenizer_pre == "default") {
            } else if (
                    tokenizer_pre == "llama3"   ||
                    tokenizer_pre == "llama-bpe") {
            } else if (tokenizer_pre == "gpt-4o") { // tokenizer_pre == "in-a-comment"
            } else {
                throw std::runtime_error(format("unknown pre-tokenizer type: '%s'", tokenizer_pre.c_str()));
            }
"""

GGML_H = """
    enum ggml_type {
        GGML_TYPE_F32     = 0,
        GGML_TYPE_Q4_0    = 2,
        // GGML_TYPE_Q4_2 = 4, support has been removed
        GGML_TYPE_Q8_K    = 15,
        GGML_TYPE_I8,
        GGML_TYPE_COUNT,
    };
    enum ggml_prec { GGML_PREC_DEFAULT };
"""


def test_tables_are_read_without_comments_placeholders_or_counts():
    s = _script()
    assert s.architectures(ARCH_CPP) == ["llama", "qwen3moe"]
    assert s.pre_tokenizers(VOCAB_CPP) == ["default", "gpt-4o", "llama-bpe", "llama3"]
    assert s.ggml_types(GGML_H) == ["F32", "I8", "Q4_0", "Q8_K"]


def test_vendored_commit_is_the_one_the_release_section_names():
    s = _script()
    changelog = (
        "## [Unreleased]\n\n## [0.3.24]\n\n- fix: x\n- feat: Update llama.cpp to ggml-org/llama.cpp@af6528e6d\n\n"
        "## [0.3.23]\n\n- feat: Update llama.cpp to ggerganov/llama.cpp@7d442abf\n\n## [0.3.22]\n"
    )
    assert s.vendored_commit(changelog, "0.3.24") == "af6528e6d"
    assert s.vendored_commit(changelog, "0.3.23") == "7d442abf"
    assert s.vendored_commit(changelog, "0.3.22") is None


def test_converter_map_follows_inheritance_and_leaves_projectors_out():
    s = _script()
    files = {
        "conversion/a.py": (
            '@ModelBase.register("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")\n'
            "class Gemma3Model(TextModel):\n    model_arch = gguf.MODEL_ARCH.GEMMA3\n\n"
            '@ModelBase.register("Gemma3ForConditionalGeneration")\n'
            "class Gemma3VisionModel(MmprojModel):\n    pass\n\n"
            '@ModelBase.register(\n    "MyGemmaVariant",\n)\n'
            "class Variant(Gemma3Model):\n    def f(self):\n        pass\n"
        ),
        "gguf-py/gguf/constants.py": 'MODEL_ARCH_NAMES: dict = {\n    MODEL_ARCH.GEMMA3: "gemma3",\n}\n',
    }
    archs = s.converter_archs(files.get, ["conversion/a.py"])
    assert archs == {
        "Gemma3ForCausalLM": "gemma3",
        "Gemma3ForConditionalGeneration": "gemma3",
        "MyGemmaVariant": "gemma3",
    }
