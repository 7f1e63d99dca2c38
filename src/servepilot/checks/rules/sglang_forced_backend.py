"""SGLang refuses a named attention backend on this GPU: the asserts alone, read from every
release 0.5.4.post3-0.5.23. --attention-backend only on release lines whose default choice is
not modelled (elsewhere SP-ATTN-004 judges it); --prefill/--decode-attention-backend on all."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import rule

KNOWLEDGE = "servepilot/engines/sglang/knowledge/attention.yaml"


def _named(opts: dict, reads) -> list[tuple[str, str]]:
    """(option, backend) pairs the assert compares, as the release reads them."""
    attn, pre, dec = (
        opts.get(k)
        for k in ("attention_backend", "prefill_attention_backend", "decode_attention_backend")
    )
    picks = {
        "attention": ("attention_backend", attn),
        "prefill": ("prefill_attention_backend", pre),
        "decode": ("decode_attention_backend", dec),
        "prefill_or_attention": ("prefill_attention_backend", pre)
        if pre
        else ("attention_backend", attn),
        "decode_or_attention": ("decode_attention_backend", dec)
        if dec
        else ("attention_backend", attn),
    }
    return [(name, str(value)) for name, value in (picks[r] for r in reads) if value]


def refusal(version: str, cc: tuple[int, int], use_mla: bool, opts: dict):
    """(row, option) of the first assert the named backends fail, or None."""
    from servepilot.engines.sglang.release import forced_refusals

    for row in forced_refusals(version):
        for option, backend in _named(opts, row.reads):
            if backend != row.backend:
                continue
            if row.fa3_rule:
                ok = (cc[0] == 8 and not use_mla) or cc[0] == 9
            else:
                ok = cc[0] in row.cc_major_not_in
            if not ok:
                return row, option
    return None


@rule(
    "SP-ATTN-007",
    "attention_backend",
    "SGLang refuses the named attention backend on this GPU generation",
    facts=(
        "trtllm_mla needs Blackwell (majors 10/12 up to 0.5.8, 10-12 from 0.5.9); trtllm_mha "
        "needs SM100 for "
        "prefill (and from 0.5.11 SM90/SM100/SM120 for decode); fa3 needs SM80 for MHA models or "
        "SM90.",
        "--attention-backend is checked here only on release lines whose whole backend choice "
        "is not modelled (there SP-ATTN-004 speaks); --prefill/--decode-attention-backend on "
        "every line read; a backend SGLang picks itself is not judged.",
    ),
    sources=(
        KNOWLEDGE,
        "sglang/srt/server_args.py@v0.5.4.post3 ... @v0.5.18",
        "sglang/srt/layers/attention/attention_registry.py@v0.5.4.post3 ... @v0.5.23",
    ),
    engines=("sglang",),
)
def sglang_forced_backend_refused(dep, ctx) -> list[Finding]:
    from servepilot.engines.sglang import attention

    res = ctx.resolution
    version = dep.engine_version or res.engine_version
    opts = dep.launch.options
    if res.gpu_cc is None or not version:
        return []
    found = refusal(version, res.gpu_cc, bool(res.use_mla), opts)
    if found is None:
        return []
    row, option = found
    if option == "attention_backend" and attention.modelled(version):
        return []  # the whole choice is modelled: SP-ATTN-004 judges --attention-backend
    cc = f"{res.gpu_cc[0]}.{res.gpu_cc[1]}"
    flag = f"--{option.replace('_', '-')} {opts[option]}"
    remedies = []
    for alt in ("triton", "flashinfer"):
        trial = {**opts, option: alt}
        if refusal(version, res.gpu_cc, bool(res.use_mla), trial) is None:
            remedies.append(
                Remedy(
                    "flag",
                    f"--{option.replace('_', '-')} {alt}",
                    "Triton kernels run on every CUDA GPU; usually slower than the tuned backends"
                    if alt == "triton"
                    else "FlashInfer kernels: SGLang's general default on CUDA",
                    {"set": {option: alt}, "unset": []},
                )
            )
    return [
        Finding(
            "SP-ATTN-007",
            "attention_backend",
            "error",
            f"SGLang {version} refuses {flag} on compute capability {cc}",
            f"SGLang {version} on {dep.cluster.gpus[0].name if dep.cluster.gpus else 'this GPU'} "
            "will stop at start-up:"
            f"\n  {row.error}",
            (
                Evidence(f"{flag} on compute capability {cc}", "command line"),
                Evidence(row.error, row.source),
            ),
            tuple(remedies),
        )
    ]
