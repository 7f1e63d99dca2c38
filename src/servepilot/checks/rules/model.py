"""The checkpoint against the engine: architecture known, custom code trusted, context length."""

from __future__ import annotations

from servepilot.checks.finding import Evidence, Finding, Remedy
from servepilot.checks.registry import ANY_PLATFORM, rule

ARCH_KNOWLEDGE = "servepilot/engines/vllm/knowledge/architectures.yaml"


@rule(
    "SP-ARCH-001", "unsupported_arch", "Architecture not served by this engine version",
    facts=("vLLM serves the architectures in its model registry; others raise \"Model architectures [...] are not "
           "supported for now\" unless the Transformers backend can run the model.",
           "servepilot knows the registry of each release it read (0.4.3, 0.5.1, 0.5.3, 0.5.4, 0.6.4, 0.6.6, 0.7.0, "
           "0.7.1, 0.7.3, 0.8.5, 0.9.2, and 0.10.0 to 0.34.0), and the first release that served "
           "some common "
           "architectures (Qwen3 0.8.4, Gemma 3 0.8.0, ...); a release between two reads is unknown for an "
           "architecture that appeared in between."),
    sources=(ARCH_KNOWLEDGE,
             "vllm/model_executor/models/registry.py@v0.18.0 ... @v0.34.0 (tables and "
             "_PREVIOUSLY_SUPPORTED_MODELS)"),
    engines=("vllm",), platforms=ANY_PLATFORM,
)
def architecture_known(dep, ctx) -> list[Finding]:
    spec = dep.spec
    version = ctx.resolution.engine_version
    if spec is None or not spec.architectures or version is None or spec.format == "gguf":
        return []
    arch = spec.architectures[0]
    # the version as given: the resolver clamps releases older than the first one read to it
    version = dep.engine_version or version
    status, since = ctx.resolution.release.architecture
    custom = spec.custom_code is not None and bool(spec.custom_code.auto_map)
    if status == "native":
        return []
    if status == "unknown":
        return [Finding("SP-ARCH-001", "unsupported_arch", "info", f"{arch}: support in vLLM {version} not known to "
                                                                   "servepilot",
                        f"servepilot has not read vLLM {version}'s model "
                        f"registry{f' (first seen in {since})' if since else ''}.",
                        (Evidence(f"architectures = {list(spec.architectures)}", f"{spec.path}/config.json"),), ())]
    from servepilot.engines.vllm.release import retired_in

    retired = retired_in(arch, version)
    if retired is not None:
        return [_retired(spec, arch, version, *retired, custom=custom)]
    remedies = []
    if since:
        remedies.append(Remedy("upgrade", f"pip install 'vllm>={since}'", f"{arch} is registered natively from {since}",
                               {"upgrade": {"package": "vllm", "specifier": f">={since}"}}))
    severity = "warning" if custom else "error"
    detail = (f"vLLM {version}'s model registry has no {arch}. "
              + ("The checkpoint ships its own modelling code; vLLM may try the Transformers backend, which works only "
                 "if that code supports it (slower, fewer features)."
                 if custom else "The engine will raise: Model architectures ['" + arch + "'] are not supported for "
                                                                                         "now."))
    return [Finding("SP-ARCH-001", "unsupported_arch", severity, f"{arch} is not served natively by vLLM {version}",
                    detail,
                    (Evidence(f"architectures = {list(spec.architectures)}", f"{spec.path}/config.json"),
                     Evidence(f"{arch}: first in vLLM {since}" if since else f"{arch}: in no release read",
                              ARCH_KNOWLEDGE)),
                    tuple(remedies))]


def _retired(spec, arch: str, version: str, removed_in: str, last: str | None, *,
             custom: bool) -> Finding:
    """vLLM retired the architecture: its registry names the last release that served it (the
    Transformers backend is tried first, so checkpoint code that runs there may still serve)."""
    until = last or "an older release"
    message = (f"Model architecture {arch} was supported in vLLM until v{last}, and is not "
               "supported anymore." if last
               else f"Model architectures ['{arch}'] are not supported for now.")
    removed = f"{arch}: removed in vLLM {removed_in}"
    if last:
        removed += f", supported until {last}"
    return Finding(
        "SP-ARCH-001", "unsupported_arch", "warning" if custom else "error",
        f"vLLM {version} no longer serves {arch}",
        f"vLLM retired {arch} (its registry lacks it from {removed_in} on; last served by "
        f"{until}). The engine will raise: {message}",
        (Evidence(f"architectures = {list(spec.architectures)}", f"{spec.path}/config.json"),
         Evidence(removed, ARCH_KNOWLEDGE)),
        (Remedy("upgrade", f"pip install 'vllm<{removed_in}'",
                f"the last releases that register {arch}; newer models and fixes are missing there",
                {"upgrade": {"package": "vllm", "specifier": f"<{removed_in}"}}),))


@rule(
    "SP-CODE-001", "remote_code", "Checkpoint custom code and --trust-remote-code",
    facts=("A config.json with auto_map makes transformers import the checkpoint's Python files; without "
           "trust_remote_code it refuses (\"requires you to execute the configuration file in that repo\").",
           "With --trust-remote-code those files run with the server's privileges: they are listed with their sha256 "
           "so they can be reviewed."),
    sources=("servepilot/engines/vllm/knowledge/config_types.yaml",
             "transformers/models/auto/configuration_auto.py@v4.57.1",
             "vllm/transformers_utils/config.py@v0.16.0 (get_config, _CONFIG_REGISTRY)"), platforms=ANY_PLATFORM,
)
def remote_code(dep, ctx) -> list[Finding]:
    spec = dep.spec
    if spec is None or spec.custom_code is None or not spec.custom_code.auto_map:
        return []
    trusted = bool(dep.launch.get("trust_remote_code"))
    files, listing, evidence = _code_files(spec)
    needs_code = _needs_remote_code(dep, ctx)
    if trusted or not needs_code:
        return []
    return [Finding("SP-CODE-001", "remote_code", "error", "the checkpoint's configuration needs --trust-remote-code",
                        "config.json maps its classes to Python files in the checkpoint (auto_map) and neither "
                        f"transformers nor the engine has a config class for model_type {spec.model_type!r}. Reading "
                        f"the config will fail without --trust-remote-code. Files that would run:\n{listing}",
                        evidence,
                    (Remedy("flag", "--trust-remote-code",
                            "runs the listed Python files with the server's privileges: review them first",
                            {"set": {"trust_remote_code": True}, "unset": []}),))]
    return []


@rule("SP-CODE-002", "remote_code", "Custom code that --trust-remote-code will run",
      facts=("Lists the checkpoint files (and sha256) that run when --trust-remote-code is given.",),
      sources=("transformers/dynamic_module_utils.py (get_class_from_dynamic_module)",), platforms=ANY_PLATFORM)
def remote_code_listing(dep, ctx) -> list[Finding]:
    spec = dep.spec
    if (spec is None or spec.custom_code is None or not spec.custom_code.auto_map
            or not dep.launch.get("trust_remote_code")):
        return []
    files, listing, evidence = _code_files(spec)
    missing = [f.name for f in files if not f.present]
    severity = "error" if missing else "warning"
    detail = f"--trust-remote-code lets the checkpoint's Python run inside the engine. Files that will run:\n{listing}"
    if missing:
        detail += f"\nMissing: {', '.join(missing)}: the import will fail."
    return [Finding("SP-CODE-002", "remote_code", severity,
                    f"--trust-remote-code will run {len(files)} Python file(s) from the checkpoint", detail, evidence,
                    ())]



def _code_files(spec):
    files = spec.custom_code.files
    listing = "\n".join(f"  - {f.name}: {'sha256 ' + f.sha256 if f.sha256 else 'MISSING from the checkpoint'}"
                        for f in files) or "  (no files found)"
    evidence = tuple(Evidence(f"{f.name} sha256 {f.sha256}" if f.sha256 else f"{f.name} missing",
                              f"{spec.path}/{f.name}") for f in files)
    evidence += (Evidence(f"auto_map: {', '.join(sorted(spec.custom_code.auto_map))}", f"{spec.path}/config.json"),)
    return files, listing, evidence


def _needs_remote_code(dep, ctx) -> bool:
    """Whether reading config.json needs the checkpoint's own configuration code.

    transformers reads the model types in its CONFIG_MAPPING and vLLM registers its own
    config classes for some more (_CONFIG_REGISTRY); any other model_type is read through
    auto_map, which runs the checkpoint's Python.
    """
    spec = dep.spec
    model_type = spec.model_type
    if model_type is None:
        return True
    return model_type not in ctx.resolution.release.config_types


def derived_max_len(spec) -> tuple[int | None, str]:
    """vLLM's derived max_model_len, from the one derivation (planning/common.py)."""
    from servepilot.planning.common import derived_max_model_len_and_how

    if spec is None or (
        not spec.config
        and not spec.text_config
        and not spec.max_position_embeddings
        and not (spec.gguf and spec.gguf.context_length)
    ):
        return None, ""
    return derived_max_model_len_and_how(spec)


@rule(
    "SP-LEN-001", "max_model_len", "max_model_len beyond what the model supports",
    facts=("vLLM raises 'User-specified max_model_len (X) is greater than the derived max_model_len (Y)' unless "
           "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",),
    sources=("vllm/config/model.py@v0.16.0 (_get_and_verify_max_len)",), platforms=ANY_PLATFORM,
)
def max_model_len(dep, ctx) -> list[Finding]:
    spec = dep.spec
    want = dep.launch.get("max_model_len")
    if spec is None or want in (None, "auto", -1):
        return []
    try:
        want = int(want)
    except (TypeError, ValueError):
        return []
    limit, how = derived_max_len(spec)
    if limit is None or want <= limit:
        return []
    allowed = (dep.launch.shell.env or {}).get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") in ("1", "true", "True")
    return [
        Finding(
            "SP-LEN-001",
            "max_model_len",
            "warning" if allowed else "error",
            f"--max-model-len {want:,} exceeds the model's {limit:,}",
            f"The derived maximum is {limit:,} ({how}). "
            + (
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 lets it start, but outputs past the trained length are unreliable."
                if allowed
                else f"vLLM will raise: User-specified max_model_len ({want}) is greater than the derived "
                     f"max_model_len ({limit})."
            ),
            (Evidence(f"derived max_model_len {limit:,} = {how}", f"{spec.path}/config.json"),),
            (
                Remedy(
                    "flag",
                    f"--max-model-len {limit}",
                    f"requests longer than {limit:,} tokens are refused",
                    {"set": {"max_model_len": limit}, "unset": []},
                ),
            ),
        )
    ]


@rule(
    "SP-LEN-003", "max_model_len", "Per-step token budget below max_model_len without chunked prefill",
    facts=("With chunked prefill off a prompt must fit one scheduler step, so vLLM's "
           "SchedulerConfig refuses --max-num-batched-tokens below max_model_len: 'max_num_batched_tokens (N) is "
           "smaller than max_model_len (M)'.",
           "max_model_len is --max-model-len, else the one vLLM derives from config.json."),
    sources=("servepilot/engines/vllm/knowledge/engine.yaml (scheduler_budget_below_len)",
             "vllm/config/scheduler.py@v0.19.0 (verify_max_model_len)",
             "servepilot/engines/vllm/knowledge/engine.yaml (v1_forces_chunked_prefill)",
             "vllm/engine/arg_utils.py@v0.8.5, @v0.10.2 and @v0.11.0 (V1 forces chunked prefill)"),
    engines=("vllm",), platforms=ANY_PLATFORM,
)
def budget_below_max_model_len(dep, ctx) -> list[Finding]:
    from servepilot.engines.vllm.release import scheduler_budget_below_len

    spec = dep.spec
    version = dep.engine_version
    if spec is None or version is None or dep.launch.get("enable_chunked_prefill") is not False:
        return []  # chunked prefill on, or left to the engine's default: prompts are split
    if _chunked_prefill_forced_on(dep, version) is not None:
        return []  # the V1 engine turns chunked prefill back on whatever the flag says
    row = scheduler_budget_below_len(version)
    budget = _int_or_none(dep.launch.get("max_num_batched_tokens"))
    if row is None or budget is None:
        return []
    given = _int_or_none(dep.launch.get("max_model_len"))
    length, how = (given, "--max-model-len") if given else derived_max_len(spec)
    if length is None or budget >= length:
        return []
    return [Finding(
        "SP-LEN-003", "max_model_len", "error",
        f"--max-num-batched-tokens {budget:,} is below max_model_len {length:,}",
        f"Chunked prefill is off, so every prompt must fit one step of {budget:,} tokens, and "
        f"max_model_len is {length:,} ({how}). vLLM {version} will raise: "
        + row.message.format(budget=budget, length=length),
        (Evidence("--no-enable-chunked-prefill, --max-num-batched-tokens "
                  f"{budget}", "command line"),
         Evidence(f"max_model_len {length:,} ({how})", f"{spec.path}/config.json"),
         Evidence("SchedulerConfig: budget >= max_model_len without chunked prefill", row.source)),
        (Remedy("flag", f"--max-num-batched-tokens {length}",
                "larger prefill steps: more activation memory in profiling, less KV cache",
                {"set": {"max_num_batched_tokens": length}, "unset": []}),
         Remedy("flag", f"--max-model-len {budget}",
                f"requests longer than {budget:,} tokens are refused",
                {"set": {"max_model_len": budget}, "unset": []}),
         Remedy("flag", "--enable-chunked-prefill", "long prompts are prefilled over several steps",
                {"set": {"enable_chunked_prefill": True}, "unset": []})),
    )]


def _chunked_prefill_forced_on(dep, version: str):
    """The row saying the V1 engine overwrites --no-enable-chunked-prefill, when `dep` runs on
    V1 in a release that does so and its runner is not spared; else None (not forced, or a
    release not read)."""
    from servepilot.engines.vllm.release import v1_forces_chunked_prefill
    from servepilot.planning.common import older
    from servepilot.planning.facts import fact

    row = v1_forces_chunked_prefill(version)
    if row is None or not row.value:
        return None
    generation = fact("vllm", "generation", version).value
    use_v1 = str(dep.launch.shell.env.get("VLLM_USE_V1", ""))
    if generation != "v1" or (use_v1 == "0" and older(version, "0.11.0")):
        return None  # the V0 engine keeps the user's choice
    if _pooling_runner(dep.launch) and row.pooling_spared:
        return None
    return row


def _pooling_runner(launch) -> bool:
    """Whether the command asks for a pooling runner (--runner pooling, --task embed, ...)."""
    runner = str(launch.get("runner") or "")
    task = str(launch.get("task") or "")
    return runner == "pooling" or task in {"embed", "embedding", "classify", "score", "reward"}


def _int_or_none(value) -> int | None:
    try:
        return int(value) if value not in (None, "auto", -1) else None
    except (TypeError, ValueError):
        return None


@rule(
    "SP-TMPL-001", "tokenizer_template", "No chat template: chat requests will fail",
    facts=("Since transformers 4.44 a tokenizer without chat_template has no default; the server starts but "
           "/v1/chat/completions answers with an error ('you must provide a chat template').",
           "The template can come from tokenizer_config.json chat_template, a chat_template.jinja / chat_template.json "
           "file, or --chat-template."),
    sources=("transformers/tokenization_utils_base.py@v4.44.0 (apply_chat_template)",
             "vllm/entrypoints/chat_utils.py@v0.16.0 (resolve_hf_chat_template)"), platforms=ANY_PLATFORM,
)
def chat_template(dep, ctx) -> list[Finding]:
    import json
    from pathlib import Path

    spec = dep.spec
    if spec is None or spec.format != "hf" or dep.launch.get("chat_template"):
        return []
    root = Path(spec.path)
    tokenizer_config = root / "tokenizer_config.json"
    if not tokenizer_config.is_file():
        return []
    if any((root / name).is_file() for name in ("chat_template.jinja", "chat_template.json")):
        return []
    try:
        data = json.loads(tokenizer_config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict) or data.get("chat_template"):
        return []
    return [Finding("SP-TMPL-001", "tokenizer_template", "warning", "the checkpoint has no chat template",
                    "tokenizer_config.json has no chat_template and there is no chat_template.jinja: the server "
                    "starts, "
                    "but every /v1/chat/completions request fails until a template is given (completions still work).",
                    (Evidence("tokenizer_config.json without chat_template", str(tokenizer_config)),),
                    (Remedy("flag", "--chat-template <template.jinja from the model card>",
                            "a template that does not match the model's training format degrades answers",
                            {"set": {"chat_template": "<path>"}, "unset": []}),))]


@rule(
    "SP-LEN-002", "max_model_len", "llama.cpp context beyond the model's training context",
    facts=("llama.cpp accepts -c larger than the GGUF's <arch>.context_length and warns 'n_ctx_seq (N) > n_ctx_train "
           "(M) -- possible training context overflow' "
           "(n_ctx_per_seq in older builds); positions past the trained length give unreliable output unless RoPE "
           "scaling is configured.",
           "Recent llama-server builds go further and cap each slot: 'the slot context (N) exceeds the training "
           "context of the model (M) - capping'.",),
    sources=("ggml-org/llama.cpp src/llama-context.cpp (llama_context constructor: n_ctx_seq > n_ctx_train warning)",
             "ggml-org/llama.cpp tools/server/server.cpp (load_model: slot context capped to the training context)"),
    engines=("llama.cpp",), platforms=ANY_PLATFORM,
)
def llamacpp_context(dep, ctx) -> list[Finding]:
    spec = dep.spec
    if dep.engine != "llama.cpp" or spec is None:
        return []
    trained = spec.max_position_embeddings or (spec.gguf.context_length if spec.gguf else None)
    want = dep.launch.get("ctx_size") or dep.launch.get("n_ctx")
    try:
        want = int(want)
    except (TypeError, ValueError):
        return []
    if not trained or want <= trained:
        return []
    scaled = any(dep.launch.get(k) for k in ("rope_scaling", "rope_freq_scale", "rope_scale", "yarn_orig_ctx"))
    if scaled:
        return []
    return [Finding("SP-LEN-002", "max_model_len", "warning", f"-c {want:,} exceeds the model's training context "
                                                              f"{trained:,}",
                    f"llama.cpp starts but warns n_ctx ({want:,}) > n_ctx_train ({trained:,}): recent llama-server "
                    f"builds cap each slot at {trained:,} tokens, older ones run past it with unreliable output (no "
                    "RoPE scaling is configured).",
                    (Evidence(f"context_length = {trained}", spec.path), Evidence(f"-c {want}", "command line")),
                    (Remedy("flag", f"-c {trained}", f"contexts longer than {trained:,} tokens are cut",
                            {"set": {"ctx_size": trained}, "unset": []}),))]


def tokenizer_code_classes(root) -> tuple[str | None, list[str]]:
    """(tokenizer_class, the classes tokenizer_config.json's auto_map defines in checkpoint code)."""
    import json
    from pathlib import Path

    path = Path(root) / "tokenizer_config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return None, []
    if not isinstance(data, dict):
        return None, []
    refs = ((data.get("auto_map") or {}) if isinstance(data.get("auto_map"), dict) else {}).get("AutoTokenizer") or []
    refs = refs if isinstance(refs, list) else [refs]
    classes = [r.rpartition(".")[2] for r in refs if isinstance(r, str) and "--" not in r]
    return data.get("tokenizer_class"), classes


@rule(
    "SP-CODE-003", "remote_code", "A tokenizer only the checkpoint's own code defines",
    facts=("transformers' AutoTokenizer needs trust_remote_code when tokenizer_config.json maps AutoTokenizer to the "
           "checkpoint's Python and its tokenizer_class is a class of that code, not of transformers: 'Loading X "
           "requires you to execute the tokenizer file in that repo'.",
           "vLLM and SGLang load the tokenizer with the server's --trust-remote-code even when the engine has its own "
           "config class for the model (ChatGLM, InternVL)."),
    sources=("transformers/models/auto/tokenization_auto.py@v4.57.1 (AutoTokenizer.from_pretrained: has_remote_code, "
             "has_local_code, resolve_trust_remote_code)",
             "vllm/transformers_utils/tokenizer.py@v0.16.0 (get_tokenizer passes trust_remote_code)"),
    engines=("vllm", "sglang"), platforms=ANY_PLATFORM,
)
def tokenizer_remote_code(dep, ctx) -> list[Finding]:
    spec = dep.spec
    if spec is None or spec.format != "hf" or dep.launch.get("trust_remote_code") or dep.launch.get("tokenizer"):
        return []
    tokenizer_class, classes = tokenizer_code_classes(spec.path)
    if not tokenizer_class or tokenizer_class not in classes:
        return []
    if any(f.code == "SP-CODE-001" for f in remote_code(dep, ctx)):
        return []  # the config already needs the flag: one finding says it
    return [Finding("SP-CODE-003", "remote_code", "error", "the checkpoint's tokenizer needs --trust-remote-code",
                    f"tokenizer_config.json names tokenizer_class {tokenizer_class!r}, a class of the checkpoint's own "
                    "Python (auto_map AutoTokenizer). "
                    "The config may load through the engine's own class, but loading the tokenizer without "
                    "--trust-remote-code fails: "
                    f"'Loading {spec.path} requires you to execute the tokenizer file in that repo on your local "
                    "machine'.",
                    (Evidence(f"tokenizer_class = {tokenizer_class}; "
                              f"auto_map.AutoTokenizer defines {', '.join(classes)}",
                              f"{spec.path}/tokenizer_config.json"),),
                    (Remedy("flag", "--trust-remote-code",
                            "runs the checkpoint's tokenizer code with the server's privileges: review it first",
                            {"set": {"trust_remote_code": True}, "unset": []}),))]


@rule(
    "SP-CKPT-001",
    "other",
    "A weight shard the engine cannot load",
    facts=(
        "vLLM reads every shard the index names (or every *.safetensors file) with "
        "safetensors' safe_open; a dangling symlink, a symlink loop, a header whose length "
        "runs past the end of the file or whose "
        "tensors overlap, or a missing shard stops the weight load with an exception.",
    ),
    sources=(
        "vllm/model_executor/model_loader/weight_utils.py@v0.18.0 (safetensors_weights_iterator)",
    ), platforms=ANY_PLATFORM,
)
def damaged_shards(dep, ctx) -> list[Finding]:
    spec = dep.spec
    if spec is None or spec.format == "gguf":
        return []
    problems = [p for p in spec.problems if p.startswith("damaged shard") or "missing" in p]
    if not problems:
        return []
    shown = "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")
    return [
        Finding(
            "SP-CKPT-001",
            "other",
            "error",
            f"{len(problems)} weight shard problem(s): the load will fail",
            f"{shown}. The engine stops while loading the weights, after the start-up work. "
            "Restore the shard(s) from the original download (re-download, or fix the links).",
            tuple(Evidence(p, spec.path) for p in problems[:5]),
            (),
        )
    ]
