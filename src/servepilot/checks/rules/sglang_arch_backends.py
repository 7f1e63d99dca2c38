"""SGLang architectures whose model-specific hook asserts the attention backends they run with
(gpt-oss: attention sinks and sliding-window layers), read in server_args.py / model_hook.py."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/sglang/knowledge/attention.yaml"
_NAMED = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")


def asserted(row, opts: dict) -> dict | None:
    """The backends the release's assert compares, when one is outside row.supported (else
    None). Unset, SGLang picks a supported default for the architecture itself."""
    attn, pre, dec = (opts.get(k) for k in _NAMED)
    if not (attn or pre or dec):
        return None
    if row.reads == "attention":
        seen = {"attention": attn}
        if attn is None or attn in row.supported:
            return None
        return seen
    # get_attention_backends(): the default is set only when all three are unset
    seen = {"prefill": pre or attn, "decode": dec or attn}
    if all(v in row.supported for v in seen.values()):
        return None
    return seen


@rule(
    "SP-ATTN-010",
    "attention_backend",
    "SGLang's model-specific hook refuses the named attention backend for this architecture",
    facts=(
        "gpt-oss (GptOssForCausalLM) on SGLang 0.5.1+: left unset, SGLang picks trtllm_mha on "
        "SM100, fa3 on SM90, triton elsewhere; named, the backend must be one of triton, "
        "trtllm_mha, fa3 (fa4 from 0.5.3, ascend and others later) or ServerArgs asserts.",
        "From 0.5.3 the assert reads the prefill and decode backends; naming only one of "
        "--prefill/--decode-attention-backend leaves the other None, which fails it too.",
    ),
    sources=(
        KNOWLEDGE,
        "sglang/srt/server_args.py@v0.5.1.post3, @v0.5.3.post3, @v0.5.5.post3 and @v0.5.9",
        "sglang/srt/arg_groups/model_hook.py@v0.5.23",
    ),
    engines=("sglang",),
)
def sglang_architecture_backend(dep, ctx) -> list[Finding]:
    from servepilot.engines.sglang.release import architecture_backends

    version = dep.engine_version or ctx.resolution.engine_version
    archs = ((dep.spec.config or {}).get("architectures") or []) if dep.spec else []
    if not version or not archs:
        return []
    row = architecture_backends(version, archs[0])
    opts = dep.launch.options
    seen = asserted(row, opts) if row is not None else None
    if seen is None:
        return []
    # SGLang's f-string prints the list's repr and each backend bare (None when unnamed)
    error = row.error.format(supported=list(row.supported), **seen)
    named = " ".join(f"--{k.replace('_', '-')} {opts[k]}" for k in _NAMED if opts.get(k))
    return [
        Finding(
            "SP-ATTN-010",
            "attention_backend",
            "error",
            f"SGLang {version} runs {archs[0]} only on {', '.join(row.supported)}: "
            f"{named} is refused",
            f"SGLang {version}'s model-specific adjustments stop the server before it starts:"
            f"\n  {error}",
            (
                Evidence(named, "command line"),
                Evidence(f"{archs[0]} accepts {row.supported}", row.source),
            ),
            (
                Remedy(
                    "flag",
                    "drop the attention backend flags",
                    "SGLang picks trtllm_mha on SM100, fa3 on SM90, triton elsewhere for this "
                    "model",
                    {"set": {}, "unset": [k for k in _NAMED if opts.get(k)]},
                ),
                Remedy(
                    "flag",
                    "--attention-backend triton",
                    "Triton kernels run on every CUDA GPU; usually slower than fa3 / trtllm_mha",
                    {
                        "set": {"attention_backend": "triton"},
                        "unset": [k for k in _NAMED[1:] if opts.get(k)],
                    },
                ),
            ),
        )
    ]
