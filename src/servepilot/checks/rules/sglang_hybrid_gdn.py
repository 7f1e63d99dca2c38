"""SGLang on Blackwell: the attention backends its registry accepts for hybrid GDN models."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/sglang/knowledge/attention.yaml"
_GIVEN = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")


@rule(
    "SP-ATTN-006",
    "attention_backend",
    "SGLang refuses this attention backend for a hybrid GDN model on Blackwell",
    facts=(
        "Hybrid GDN models (Qwen3-Next, Qwen3.5, Jet-Nemotron, ...) run their full-attention "
        "layers only on a short "
        "list of backends on Blackwell: the attention registry asserts it when the model runner "
        "starts.",
        "The list grew by release: triton (0.5.4); triton, trtllm_mha (0.5.5-0.5.9); + fa4, "
        "flashinfer "
        "(0.5.10-0.5.15); from 0.5.16 SM12x takes triton, trtllm_mha, flashinfer and SM10x "
        "triton, trtllm_mha, fa4 "
        "(+ flashinfer from 0.5.21).",
        "Only a backend the operator names is judged; the one SGLang picks itself is not modelled "
        "here.",
    ),
    sources=(
        KNOWLEDGE,
        "sglang/srt/layers/attention/attention_registry.py@v0.5.4.post3 ... @v0.5.23",
        "https://github.com/sgl-project/sglang/issues/35080",
    ),
    engines=("sglang",),
)
def hybrid_gdn_backend(dep, ctx) -> list[Finding]:
    from servepilot.engines.sglang.release import hybrid_gdn_blackwell

    spec, res = dep.spec, ctx.resolution
    opts = dep.launch.options
    given = {name: str(opts[name]) for name in _GIVEN if opts.get(name)}
    if spec is None or res.gpu_cc is None or not given:
        return []
    types = {spec.model_type, spec.text_model_type} - {None}
    version = dep.engine_version or res.engine_version
    row, every_gdn_type = hybrid_gdn_blackwell(version)
    gdn_anywhere = bool(types & every_gdn_type)
    major = res.gpu_cc[0]
    if row is None:
        if gdn_anywhere and major in (10, 11, 12):
            return [
                Finding(
                    "SP-ATTN-006",
                    "attention_backend",
                    "info",
                    f"SGLang {version}'s backends for hybrid GDN models on Blackwell are not "
                    "known to servepilot",
                    "The releases read (0.5.4-0.5.23) each accept only some backends for these "
                    "models on Blackwell; "
                    f"SGLang {version} was not read, so --attention-backend "
                    f"{', '.join(given.values())} is not judged.",
                    (
                        Evidence(
                            f"model_type {', '.join(sorted(types))}", f"{spec.path}/config.json"
                        ),
                    ),
                    (),
                )
            ]
        return []
    if not types & set(row.model_types) or major not in row.blackwell_majors:
        return []
    allowed = list(row.allowed_sm120 if major == 12 else row.allowed)
    judged = _judged(given, row.checks)
    bad = {name: value for name, value in judged.items() if value not in allowed}
    if not bad:
        return []
    cc = f"{res.gpu_cc[0]}.{res.gpu_cc[1]}"
    flags = ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in bad.items())
    error = row.error.replace("{allowed}", "{" + ", ".join(repr(a) for a in sorted(allowed)) + "}")
    remedies = tuple(
        Remedy(
            "flag",
            f"--attention-backend {name}",
            f"one of the backends SGLang {version} accepts here",
            {
                "set": {"attention_backend": name},
                "unset": [n for n in bad if n != "attention_backend"],
            },
        )
        for name in allowed[:3]
    )
    return [
        Finding(
            "SP-ATTN-006",
            "attention_backend",
            "error",
            f"SGLang {version} refuses {flags} for a hybrid GDN model on compute capability {cc}",
            f"The model ({', '.join(sorted(types))}) has gated delta-net layers; on Blackwell "
            f"SGLang {version} accepts "
            f"only {', '.join(allowed)} for its attention layers and will stop when the model "
            "runner starts:\n  "
            f"AssertionError: {error}",
            (
                Evidence(f"model_type {', '.join(sorted(types))}", f"{spec.path}/config.json"),
                Evidence(f"{flags} on compute capability {cc}", "command line"),
                Evidence(f"allowed: {', '.join(allowed)}", row.source),
            ),
            remedies,
        )
    ]


def _judged(given: dict[str, str], checks: str) -> dict[str, str]:
    """The user-given backends the release's assert reads (see attention.yaml `checks`)."""
    attn = given.get("attention_backend")
    prefill, decode = given.get("prefill_attention_backend"), given.get("decode_attention_backend")
    if checks == "attention_backend":
        return {"attention_backend": attn} if attn else {}
    if checks == "split":
        if prefill and decode:
            return {"prefill_attention_backend": prefill, "decode_attention_backend": decode}
        return {"attention_backend": attn} if attn else {}
    # "resolved": prefill and decode each fall back to --attention-backend
    out = {}
    for name, value in (
        ("prefill_attention_backend", prefill),
        ("decode_attention_backend", decode),
    ):
        if value or attn:
            out[name if value else "attention_backend"] = value or attn
    return out
