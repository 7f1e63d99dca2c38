"""A GGUF against the llama.cpp build that loads it: architecture, pre-tokenizer, tensor types,
expert count.

llama.cpp refuses, while loading, a general.architecture outside its LLM_ARCH_NAMES ("unknown
model architecture"), a BPE vocabulary whose tokenizer.ggml.pre it does not list ("unknown
pre-tokenizer type") and a tensor of a ggml type it does not have. Which names a build knows
is read per build (engines/llamacpp/build_facts.py); what cannot be decided for the build
given becomes an unknown (llamacpp_build_unknowns), never a pass. The loader also asserts
that the GGUF's expert count is at most the build's compile-time LLAMA_MAX_EXPERTS.
"""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import ANY_PLATFORM, rule
from servepilot.checks.unknowns import Unknown

KNOWLEDGE = "servepilot/engines/llamacpp/knowledge/build_facts.json"
READ_FROM = (
    "36 llama.cpp release trees from b1492 to b10361 (the llama/gitRelease.bundle that "
    "node-llama-cpp ships with each release) and the llama.cpp vendored by "
    "llama-cpp-python 0.2.20 to 0.3.36 (vendor/llama.cpp of 31 of its sdists)"
)
SETTLE = (
    "--engine-version with the build number `llama-server --version` prints (or the "
    "llama-cpp-python version for `python -m llama_cpp.server`), or the engine's own start-up "
    "(servepilot launch)"
)
CHECKS = {
    "architectures": ("SP-GGUF-001", "unsupported_arch"),
    "pre_tokenizers": ("SP-GGUF-002", "tokenizer_template"),
    "ggml_types": ("SP-GGUF-003", "quantization_support"),
}


def _questions(dep) -> list[tuple[str, str, str]]:
    """(kind, name, GGUF key it came from) for what the GGUF asks of the build."""
    spec = dep.spec
    if dep.engine != "llama.cpp" or spec is None or spec.format != "gguf" or spec.gguf is None:
        return []
    g = spec.gguf
    out = []
    if g.architecture:
        out.append(("architectures", g.architecture, "general.architecture"))
    # only a BPE vocabulary ("gpt2") has a pre-tokenizer; an empty name falls back to "default"
    if g.tokenizer_model == "gpt2" and g.tokenizer_pre:
        out.append(("pre_tokenizers", g.tokenizer_pre, "tokenizer.ggml.pre"))
    out.extend(("ggml_types", t, "tensor types") for t in g.tensor_types)
    return out


def _experts(dep) -> tuple[int, str] | None:
    """(expert count, the GGUF key it came from) of a MoE GGUF for llama.cpp, else None."""
    spec = dep.spec
    if dep.engine != "llama.cpp" or spec is None or spec.format != "gguf" or spec.gguf is None:
        return None
    if spec.moe is None or not spec.moe.num_experts:
        return None
    return spec.moe.num_experts, f"{spec.gguf.architecture or '{arch}'}.expert_count"


EXPERT_ASSERT = "GGML_ASSERT(hparams.n_expert <= LLAMA_MAX_EXPERTS) failed"


def _build(dep):
    from servepilot.engines.llamacpp.build_facts import build_of

    return build_of(dep.launch.program or "", dep.engine_version)


def _findings(dep, kind: str) -> list[Finding]:
    from servepilot.engines.llamacpp.build_facts import KIND_WORDS, judge

    code, category = CHECKS[kind]
    build = _build(dep)
    if build is None:
        return []  # llamacpp_build_unknowns names what could not be judged
    out = []
    for k, name, key in _questions(dep):
        if k != kind:
            continue
        verdict = judge(kind, name, build)
        if verdict.status != "unknown_name":
            continue
        word = KIND_WORDS[kind]
        out.append(
            Finding(
                code,
                category,
                "error",
                f"{build.words} does not know the GGUF's {word} {name!r}",
                f"{build.words} has no {word} {name!r} ({verdict.why}). "
                "Loading the model fails with " + _message(kind, name),
                (
                    Evidence(f"{key} = {name!r}", dep.spec.path),
                    Evidence(f"{word} {name!r}: {verdict.why}", verdict.source),
                ),
                tuple(_remedies(build, verdict, word, name)),
            )
        )
    return out


def _message(kind: str, name: str) -> str:
    return {
        "architectures": f"\"unknown model architecture: '{name}'\".",
        "pre_tokenizers": f"\"unknown pre-tokenizer type: '{name}'\".",
        "ggml_types": f"an invalid or removed ggml type for the {name} tensors.",
    }[kind]


def _remedies(build, verdict, word: str, name: str) -> list[Remedy]:
    first = verdict.first
    if first is None:
        return [
            Remedy(
                "upgrade",
                f"a llama.cpp build newer than those read that supports {word} {name!r}, "
                "or a GGUF converted for this build",
                "no build servepilot read knows it",
            )
        ]
    if build.table == "llama_cpp":
        if first <= build.key:  # known before, gone since: an older build, or a re-converted GGUF
            return [
                Remedy(
                    "upgrade",
                    f"a GGUF re-converted without {name!r} tensors, or llama.cpp b{first}",
                    f"{name!r} was removed after b{first}",
                )
            ]
        return [
            Remedy(
                "upgrade",
                f"llama.cpp b{first} or newer",
                f"{word} {name!r} is known from b{first}",
                {"upgrade": {"package": "llama.cpp", "specifier": f">={first}"}},
            )
        ]
    if first <= build.key:
        return [
            Remedy(
                "upgrade",
                f"a GGUF re-converted without {name!r} tensors, or llama-cpp-python=={first}",
                f"{name!r} was removed after llama-cpp-python {first}",
            )
        ]
    return [
        Remedy(
            "upgrade",
            f"pip install 'llama-cpp-python>={first}'",
            f"{word} {name!r} is vendored from llama-cpp-python {first}",
            {"upgrade": {"package": "llama-cpp-python", "specifier": f">={first}"}},
        )
    ]


@rule(
    "SP-GGUF-001",
    "unsupported_arch",
    "GGUF architecture unknown to this llama.cpp build",
    facts=(
        "llama.cpp maps general.architecture through LLM_ARCH_NAMES; any other name fails "
        "the load with "
        '"unknown model architecture".',
        f"servepilot read that table in {READ_FROM}. A build between two builds read is "
        "judged when both agree; a build outside them, or none given, is unknown unless "
        "every build read knows the name.",
    ),
    sources=(
        KNOWLEDGE,
        "llama.cpp src/llama-arch.cpp@b4435 ... @b10361 (LLM_ARCH_NAMES; "
        "src/llama.cpp@b3543 ... @b4291, llama.cpp@b1492, @b2861)",
    ),
    engines=("llama.cpp",), platforms=ANY_PLATFORM,
)
def llamacpp_architecture(dep, ctx) -> list[Finding]:
    return _findings(dep, "architectures")


@rule(
    "SP-GGUF-002",
    "tokenizer_template",
    "GGUF pre-tokenizer unknown to this llama.cpp build",
    facts=(
        "A BPE vocabulary (tokenizer.ggml.model gpt2) names its pre-tokenizer in "
        "tokenizer.ggml.pre; llama.cpp compares it with the names it implements and fails "
        'with "unknown pre-tokenizer type" otherwise '
        "(builds from before that check ignore the name).",
        f"servepilot read those names in {READ_FROM}.",
    ),
    sources=(
        KNOWLEDGE,
        "llama.cpp src/llama-vocab.cpp@b4753 ... @b10361 (the BPE branch of the vocabulary "
        "loader; src/llama-model.cpp@b4435, src/llama.cpp@b3543 ... @b4291, llama.cpp@b2861)",
    ),
    engines=("llama.cpp",), platforms=ANY_PLATFORM,
)
def llamacpp_pre_tokenizer(dep, ctx) -> list[Finding]:
    return _findings(dep, "pre_tokenizers")


@rule(
    "SP-GGUF-003",
    "quantization_support",
    "GGUF tensor type unknown to this llama.cpp build",
    facts=(
        "Each GGUF tensor carries a ggml type; a build whose enum ggml_type lacks it "
        "(a type added later, "
        "or removed such as Q4_0_4_4) cannot load the file.",
        f"servepilot read enum ggml_type in {READ_FROM}.",
    ),
    sources=(
        KNOWLEDGE,
        "llama.cpp ggml/include/ggml.h@b3543 ... @b10361 (enum ggml_type; ggml.h@b1492, @b2861)",
    ),
    engines=("llama.cpp",), platforms=ANY_PLATFORM,
)
def llamacpp_tensor_types(dep, ctx) -> list[Finding]:
    return _findings(dep, "ggml_types")


@rule(
    "SP-GGUF-004",
    "unsupported_arch",
    "GGUF with more experts than this llama.cpp build's LLAMA_MAX_EXPERTS",
    facts=(
        "llama.cpp's model loader asserts GGML_ASSERT(hparams.n_expert <= LLAMA_MAX_EXPERTS); "
        "the limit is fixed when the build is compiled and grew with the models it added "
        "(8 for Mixtral, 160 for DeepSeek-V2, 256 for DeepSeek-V3, 384 for Kimi-K2, 512, 1024).",
        "servepilot read #define LLAMA_MAX_EXPERTS per build (the snapshots of build_facts.json "
        "with max_experts); a build between two reads is judged when both agree, a build newer "
        "than the last read keeps its limit, anything else is unknown.",
    ),
    sources=(
        KNOWLEDGE,
        "llama.cpp src/llama-hparams.h@b4435 ... @b10361 (#define LLAMA_MAX_EXPERTS; "
        "src/llama.cpp@b2861 ... @b4291, llama.cpp@b1892; the assert in src/llama-model.cpp, "
        "load_hparams)",
    ),
    engines=("llama.cpp",), platforms=ANY_PLATFORM,
)
def llamacpp_max_experts(dep, ctx) -> list[Finding]:
    from servepilot.engines.llamacpp.build_facts import judge_experts

    experts, build = _experts(dep), _build(dep)
    if experts is None or build is None:
        return []  # no build: llamacpp_build_unknowns says so where it matters
    n_expert, key = experts
    verdict = judge_experts(n_expert, build)
    if verdict.status != "too_many":
        return []
    return [
        Finding(
            "SP-GGUF-004",
            "unsupported_arch",
            "error",
            f"{build.words} allows fewer experts than the GGUF's {n_expert}",
            f"{build.words} was compiled with a smaller LLAMA_MAX_EXPERTS ({verdict.why}) than "
            f"the GGUF's {n_expert} experts. Loading the model aborts with "
            f'"{EXPERT_ASSERT}".',
            (
                Evidence(f"{key} = {n_expert}", dep.spec.path),
                Evidence(f"LLAMA_MAX_EXPERTS: {verdict.why}", verdict.source),
            ),
            tuple(_expert_remedies(build, verdict, n_expert)),
        )
    ]


def _expert_remedies(build, verdict, n_expert: int) -> list[Remedy]:
    first = verdict.first
    if first is None:
        return [
            Remedy(
                "upgrade",
                f"a llama.cpp build newer than those read, compiled with LLAMA_MAX_EXPERTS >= "
                f"{n_expert}",
                "no build servepilot read allows that many experts",
            )
        ]
    package, spelled = (
        ("llama.cpp", f"llama.cpp b{first} or newer")
        if build.table == "llama_cpp"
        else ("llama-cpp-python", f"pip install 'llama-cpp-python>={first}'")
    )
    return [
        Remedy(
            "upgrade",
            spelled,
            f"{n_expert} experts are allowed from {package} {first}",
            {"upgrade": {"package": package, "specifier": f">={first}"}},
        )
    ]


def llamacpp_build_unknowns(dep) -> list[Unknown]:
    """What the four rules above could not decide for this build (or for no build)."""
    from servepilot.engines.llamacpp.build_facts import KIND_WORDS, judge, judge_experts

    build = _build(dep)
    out = []
    experts = _experts(dep)
    if experts is not None:
        verdict = judge_experts(experts[0], build)
        if verdict.status == "undecided":
            runs = build.words if build is not None else "the llama.cpp build that will run"
            out.append(
                Unknown(
                    "llama.cpp expert limit",
                    f"whether {runs} allows the GGUF's {experts[0]} experts "
                    f"(LLAMA_MAX_EXPERTS): {verdict.why}",
                    SETTLE,
                )
            )
    for kind, name, _key in _questions(dep):
        verdict = judge(kind, name, build)
        if verdict.status != "undecided":
            continue
        runs = build.words if build is not None else "the llama.cpp build that will run"
        out.append(
            Unknown(
                f"llama.cpp {KIND_WORDS[kind]} support",
                f"whether {runs} knows the GGUF's {KIND_WORDS[kind]} {name!r}: {verdict.why}",
                SETTLE,
            )
        )
    return out
