"""The checkpoint's architecture against the SGLang release's model registry."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import ANY_PLATFORM, rule

KNOWLEDGE = "servepilot/engines/sglang/knowledge/architectures.yaml"


@rule(
    "SP-ARCH-002",
    "unsupported_arch",
    "Architecture not implemented by this SGLang release",
    facts=(
        "SGLang registers the EntryClass of every module in sglang/srt/models; servepilot read "
        "that list in each "
        "release line from 0.2.15 to 0.5.23 (the last post-release of each).",
        'Up to 0.4.6 an architecture outside it raises "Model architectures [...] are not '
        'supported for now".',
        "From 0.4.7 SGLang first tries the Transformers implementation (a transformers class of "
        "that name, or the "
        "checkpoint's auto_map AutoModel) and raises only when there is none or it is not "
        "backend-compatible.",
    ),
    sources=(
        KNOWLEDGE,
        "sglang/srt/models/registry.py@v0.4.6.post5 (_raise_for_unsupported)",
        "sglang/srt/model_loader/utils.py@v0.4.7.post1 (get_model_architecture)",
    ),
    engines=("sglang",), platforms=ANY_PLATFORM,
)
def sglang_architecture_known(dep, ctx) -> list[Finding]:
    from servepilot.engines.sglang.release import architecture_status, transformers_fallback

    spec = dep.spec
    version = dep.engine_version or ctx.resolution.engine_version
    if spec is None or not spec.architectures or not version or spec.format == "gguf":
        return []
    archs = list(spec.architectures)
    states = [architecture_status(a, version) for a in archs]
    if any(status == "native" for status, _ in states):
        return []
    arch, since = archs[0], states[0][1]
    evidence = [Evidence(f"architectures = {archs}", f"{spec.path}/config.json")]
    if any(s == "unknown" for s, _ in states):
        return [
            Finding(
                "SP-ARCH-002",
                "unsupported_arch",
                "info",
                f"{arch}: support in SGLang {version} not known to servepilot",
                f"servepilot has not read SGLang {version}'s model registry"
                + (f" (first seen in {since})." if since else "."),
                tuple(evidence),
                (),
            )
        ]
    evidence.append(
        Evidence(
            f"{arch}: first in SGLang {since}" if since else f"{arch}: in no release read",
            KNOWLEDGE,
        )
    )
    remedies = []
    if since:
        remedies.append(
            Remedy(
                "upgrade",
                f"pip install 'sglang>={since}'",
                f"{arch} has an SGLang implementation from {since}",
                {"upgrade": {"package": "sglang", "specifier": f">={since}"}},
            )
        )
    fallback = transformers_fallback(version)
    if fallback is None:
        return [
            Finding(
                "SP-ARCH-002",
                "unsupported_arch",
                "error",
                f"{arch} is not implemented by SGLang {version}",
                f"SGLang {version}'s model registry has no {arch} and this release has no "
                "Transformers "
                f"fallback. The engine will raise: Model architectures {archs} are not supported "
                "for now.",
                tuple(evidence),
                tuple(remedies),
            )
        ]
    auto_model = "AutoModel" in ((spec.config or {}).get("auto_map") or {})
    how = (
        "the checkpoint's own AutoModel code (auto_map)"
        if auto_model
        else f"a transformers class named {arch}, if the installed transformers has one"
    )
    evidence.append(
        Evidence("unknown architectures go to the Transformers implementation", fallback.source)
    )
    return [
        Finding(
            "SP-ARCH-002",
            "unsupported_arch",
            "warning",
            f"{arch} has no SGLang implementation in {version}",
            f"SGLang {version} will try the Transformers implementation instead: {how}. Without "
            "one (or "
            'when it is not backend-compatible) it raises "Cannot find model module" / "has no '
            "SGlang "
            'implementation and the Transformers implementation is not compatible"; with one it '
            "serves "
            "more slowly, without SGLang's fused kernels.",
            tuple(evidence),
            tuple(remedies),
        )
    ]
