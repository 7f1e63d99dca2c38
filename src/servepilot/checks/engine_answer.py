"""`check --ask-engine` (and `launch --ask-engine`): the engine's own answer beside the knowledge's.

Builds the one question (the model directory and the `vllm serve` flags as typed), asks the
engine through ask.py, and compares its KV dtype, backend and block size with the resolved
prediction. A disagreement becomes finding SP-ENGINE-001 and the engine's answer wins; an
engine that refuses the configuration becomes an error finding with its own exception text.
"""

from __future__ import annotations

import dataclasses

from servepilot.checks.finding import Evidence, Finding

CODE = "SP-ENGINE-001"


def _cc_of(dep) -> tuple[str | None, bool]:
    """(capability to fake or None for the real device, whether the device is real)."""
    gpus = dep.cluster.gpus
    if not gpus or not gpus[0].compute_capability:
        return None, False
    cc = min(g.compute_capability for g in gpus if g.compute_capability)
    return f"{cc[0]}.{cc[1]}", dep.cluster.source == "probe"  # probed: the real device answers


def ask_for(dep, *, python: str | None = None, timeout_s: float | None = None) -> dict:
    """The `engine_answer` object of check --json (docs/json/check.md)."""
    from servepilot.engines.vllm import ask

    out: dict = {"asked": False}
    if dep.engine != "vllm":
        out["note"] = f"--ask-engine asks vLLM only; {dep.engine} is answered from knowledge"
        return out
    model = dep.launch.model
    if dep.spec is None or not model:
        out["note"] = "the model directory cannot be read here: the engine was not asked"
        return out
    cc, real = _cc_of(dep)
    if cc is None:
        out["note"] = "no GPU probed and no --gpu: the engine was not asked"
        return out
    args = engine_flags(dep.launch)
    kwargs = {"python": python, "cc": None if real else cc, "gpu_name": dep.cluster.gpus[0].name,
              "gpu_count": len(dep.cluster.gpus), "env": dict(dep.launch.shell.env or {})}
    if timeout_s:
        kwargs["timeout_s"] = timeout_s
    reply = ask.ask_engine([{"id": "check", "model": str(dep.spec.path), "args": args}], **kwargs)
    out.update(python=reply.python, engine_version=reply.engine_version, device=reply.device,
               wall_s=round(reply.wall_s, 1), environment=reply.environment)
    if reply.error or not reply.answers:
        out["note"] = f"the engine was not asked: {reply.error or 'no answer'}"
        return out
    answer = reply.answers[0]
    out["asked"] = True
    out.update({k: answer.get(k) for k in ("stage", "ok", "backend", "kv_cache_dtype_final",
                                           "block_size_final", "candidates_valid", "candidates_invalid",
                                           "error", "ignored_flags", "has_sink") if answer.get(k) is not None})
    return out


def engine_flags(launch) -> list[str]:
    """The command's engine flags without the program words and the model:
    `vllm serve M --x 1` and `python -m vllm.entrypoints.openai.api_server --model M --x 1` give
    ["--x", "1"] (the model is passed to the engine on its own)."""
    tokens = list(launch.argv)[len(str(launch.program or "").split()):]
    model = launch.model
    for i, token in enumerate(tokens):
        if token == "--model" and i + 1 < len(tokens) and tokens[i + 1] == model:
            return tokens[:i] + tokens[i + 2:]
        if token == f"--model={model}" or token == model:
            return tokens[:i] + tokens[i + 1:]
    return tokens


def compare(answer: dict, resolved: dict) -> list[str]:
    """Where the engine and the knowledge differ, in words."""
    if not answer.get("asked"):
        return []
    diffs = []
    if not answer.get("ok"):
        if resolved.get("attention_backend"):
            diffs.append(f"the engine refuses ({answer.get('stage')}) where servepilot predicted "
                         f"{resolved['attention_backend']}")
        return diffs
    if answer.get("backend") != resolved.get("attention_backend"):
        diffs.append(f"attention backend: engine {answer.get('backend')}, knowledge "
                     f"{resolved.get('attention_backend')}")
    kv, known_kv = answer.get("kv_cache_dtype_final") or "auto", resolved.get("kv_cache_dtype") or "auto"
    if kv != known_kv:
        diffs.append(f"KV cache dtype: engine {kv}, knowledge {known_kv}")
    if resolved.get("attention_backend") and answer.get("block_size_final") != resolved.get("block_size"):
        diffs.append(f"block size: engine {answer.get('block_size_final')}, knowledge {resolved.get('block_size')}")
    return diffs


def findings_for(answer: dict, result) -> list[Finding]:
    """SP-ENGINE-001: the engine's answer where it differs from the prediction, or its refusal."""
    diffs = compare(answer, result.resolved)
    knowledge_fails = result.verdict == "fail"
    if not answer.get("asked") or (not diffs and (answer.get("ok") or knowledge_fails)):
        return []
    version = answer.get("engine_version") or "?"
    where = (f"vLLM {version} ({answer.get('python')}), device "
             f"{(answer.get('device') or {}).get('name')} {(answer.get('device') or {}).get('capability')}"
             f"{' (faked)' if (answer.get('device') or {}).get('faked') else ''}")
    lines = [f"Asked {where}: EngineArgs.create_engine_config() and the attention selector, no weights loaded."]
    lines += [f"  - {d}" for d in diffs]
    evidence = [Evidence(d, f"vllm=={version} (check --ask-engine)") for d in diffs]
    env = answer.get("environment") or {}
    if answer.get("has_sink") or "sink" in str(answer.get("candidates_invalid", "")):
        lines.append(f"The environment decides FlashInfer's attention sinks: flashinfer-cubin installed "
                     f"{env.get('flashinfer_cubin')}, NVIDIA's cubin artifactory reachable "
                     f"{env.get('nvidia_artifactory')}.")
    if not answer.get("ok"):
        lines.append(f"The engine stops: {answer.get('error')}")
        title = f"vLLM {version} itself refuses this configuration"
        severity = "error"
        category = "kv_cache_dtype" if "kv_cache" in str(answer.get("error")) else "attention_backend"
    else:
        lines.append("The engine's answer wins over servepilot's knowledge.")
        title = f"vLLM {version} itself answers differently from servepilot's knowledge"
        severity, category = "warning", "attention_backend"
    return [Finding(code=CODE, category=category, severity=severity, title=title, detail="\n".join(lines),
                    evidence=tuple(evidence), remedies=())]


def with_engine_answer(result, answer: dict):
    """The check result with the engine's findings added; the engine's answer wins the verdict."""
    from servepilot.checks.result import verdict_of

    extra = findings_for(answer, result)
    findings = tuple(result.findings)
    if answer.get("asked") and answer.get("ok") and result.verdict == "fail":
        # the engine got past configuration and selection: predicted refusals of those stages are overruled
        overruled = {"SP-ATTN-001", "SP-KV-001"}
        if any(f.code in overruled for f in findings):
            findings = tuple(f for f in findings if f.code not in overruled)
            extra = extra or [Finding(code=CODE, category="attention_backend", severity="warning",
                                      title="vLLM itself accepts what servepilot's knowledge predicted it would refuse",
                                      detail=f"vLLM {answer.get('engine_version')} picks {answer.get('backend')}; the "
                                             "engine's answer wins.",
                                      evidence=(), remedies=())]
    findings = findings + tuple(extra)
    notes = tuple(result.notes) + ((answer["note"],) if answer.get("note") else ())
    return dataclasses.replace(result, findings=findings, verdict=verdict_of(findings, result.unknowns), notes=notes)


def answer_lines(answer: dict) -> list[str]:
    """The engine's answer under the knowledge's `will use` block (text output)."""
    if not answer.get("asked"):
        return []
    device = answer.get("device") or {}
    lines = [f"vLLM {answer.get('engine_version')} itself says (device {device.get('name')} "
             f"{device.get('capability')}{', faked' if device.get('faked') else ''}; {answer.get('wall_s')} s):"]
    if answer.get("ok"):
        lines.append(f"  KV cache      {answer.get('kv_cache_dtype_final')} · block {answer.get('block_size_final')}")
        lines.append(f"  attention     {answer.get('backend')}")
    else:
        lines.append(f"  refuses at {answer.get('stage')}: {answer.get('error')}")
    for backend, reasons in (answer.get("candidates_invalid") or {}).items():
        lines.append(f"  rejected      {backend}: {', '.join(reasons)}")
    env = answer.get("environment") or {}
    if env:
        lines.append(f"  environment   flashinfer-cubin {env.get('flashinfer_cubin')}, "
                     f"NVIDIA artifactory reachable {env.get('nvidia_artifactory')}")
    return lines
