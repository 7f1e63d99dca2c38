"""Engine command lines: parse (any engine) into an EngineLaunch, render back, change flags.

    launch = parse_command("NCCL_PROTO=LL nohup vllm serve /m -tp 8 > log 2>&1 &", engine_version="0.16.0")
    launch.options["tensor_parallel_size"]  # 8
    render_command(with_options(launch, {"kv_cache_dtype": "auto"}))

Options are normalized to the engine's own dest names (vLLM EngineArgs fields, SGLang
ServerArgs fields, llama.cpp long option names), using the flag tables of
`engines/<engine>/knowledge/flags.json` for the engine version in question.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType

from servepilot.engines.argv import ParsedArgs, parse_args
from servepilot.engines.command import EngineLaunch, ShellContext
from servepilot.engines.flagtable import NO_VALUE_KINDS, VersionTable, load_table
from servepilot.engines.shell import command_text, read_command_file, render_shell, split_shell_line
from servepilot.errors import BadInput, CommandLineError, not_utf8, unreadable_file


def _engine_modules() -> tuple[ModuleType, ...]:
    """Each registered engine's command-line module, in the registry's order."""
    from servepilot.engines.registry import ENGINES

    return tuple(e.cmdline for e in ENGINES)


def detect_engine(argv: Sequence[str]) -> tuple[ModuleType, str, int] | None:
    """(engine module, program, number of program words) for an engine argv, else None."""
    for module in _engine_modules():
        found = module.detect(argv)
        if found:
            return module, found[0], found[1]
    return None


def is_engine_command(argv: Sequence[str]) -> bool:
    return detect_engine(argv) is not None


def engine_of(argv: Sequence[str]) -> str | None:
    found = detect_engine(argv)
    return found[0].ENGINE if found else None


def split_command(command: str | Sequence[str] | None = None, command_file: str | None = None):
    """The engine argv and shell context of a command (words, one shell line, or a script)."""
    given = command is not None and (isinstance(command, str) or bool(list(command)))
    if command_file and given:
        raise CommandLineError("give the engine command after `--` or with --command-file, not both")
    if command_file:
        text = read_command_file(command_file)
        try:
            return split_shell_line(text, is_engine_command)
        except CommandLineError as exc:
            if exc.path is None:  # name the script: the problem is in it, not on the command line
                raise CommandLineError(exc.problem, path=command_file, hint=exc.hint) from None
            raise
    if not given:
        raise CommandLineError("no command: give the engine command after `--` or with --command-file")
    return split_shell_line(command_text(command), is_engine_command)


def parse_command(
    command: str | Sequence[str] | None = None,
    *,
    command_file: str | None = None,
    engine_version: str | None = None,
    cwd: str | Path | None = None,
) -> EngineLaunch:
    """Parse a command as the operator typed it (see the module docstring)."""
    split = split_command(command, command_file)
    launch = parse_argv(split.argv, split.context, engine_version=engine_version, cwd=cwd)
    return replace(launch, notes=tuple(split.notes) + launch.notes)


def _table(module: ModuleType, program: str, engine_version: str | None) -> VersionTable:
    key = module.table_key(program) if hasattr(module, "table_key") else module.TABLE_KEY
    return load_table(module.TABLE_PACKAGE, key).for_version(engine_version, program=program)


def parse_argv(
    argv: Sequence[str],
    shell: ShellContext | None = None,
    *,
    engine_version: str | None = None,
    cwd: str | Path | None = None,
) -> EngineLaunch:
    """An EngineLaunch for the engine's own argv (program words first)."""
    shell = shell or ShellContext()
    found = detect_engine(argv)
    if found is None:
        program = argv[0] if argv else ""
        raise CommandLineError(f"unknown engine program {program!r}", hint="servepilot knows vLLM, SGLang and "
                                                                           "llama.cpp servers")
    module, program, skip = found
    problem = module.check_program(program)
    if problem:
        raise CommandLineError(problem)
    vt = _table(module, program, engine_version)
    args = list(argv[skip:])

    config_file, config_parsed, config_notes = _config_options(module, args, shell, cwd, vt)
    parsed = parse_args(args, vt)
    options = vt.default_values()
    explicit: set = set()
    unknown: list[str] = []
    notes: list[str] = list(config_notes)
    rejected: list[str] = []
    if config_parsed is not None:
        options.update(config_parsed.options)
        explicit |= config_parsed.explicit
        unknown += config_parsed.unknown_flags
        notes += config_parsed.notes
        rejected += config_parsed.rejected
    # CLI after the YAML: "cli > config > defaults" (vllm/utils/argparse_utils.py@v0.16.0).
    options.update(parsed.options)
    explicit |= parsed.explicit
    unknown += parsed.unknown_flags
    notes += parsed.notes
    rejected += parsed.rejected

    if hasattr(module, "normalize"):
        module.normalize(options, explicit, notes)
    model = module.model_of(parsed.positionals, options, program)
    if model is not None:
        options[module.MODEL_DEST] = model
        explicit.add(module.MODEL_DEST)
    extra_positionals = parsed.positionals[1:] if module.model_positional(program) else parsed.positionals
    for word in extra_positionals:
        if hasattr(module, "positional_problem"):
            problem = module.positional_problem(program, word)
        else:
            problem = f"unexpected argument {word!r}: {module.ENGINE}'s parser rejects stray positional arguments"
        notes.append(problem)
        if problem and "reject" in problem:
            rejected.append(problem)
    if model is None:
        notes.append(f"no model given to {program}")
    notes += _unknown_notes(module, program, unknown, engine_version)
    rejected += _unrecognized(module, program, unknown, engine_version)

    return EngineLaunch(
        engine=module.ENGINE,
        argv=tuple(argv),
        program=program,
        model=model,
        options=options,
        explicit=frozenset(explicit),
        unknown_flags=tuple(dict.fromkeys(unknown)),
        shell=shell,
        config_file=config_file,
        engine_version=engine_version,
        notes=tuple(dict.fromkeys(notes)),
        rejected=tuple(dict.fromkeys(rejected)),
    )


# servepilot's options that an operator may type after `--` by mistake (they are not engine flags)
SERVEPILOT_OPTIONS = frozenset({"--json", "--gpu", "--engine-version", "--command-file", "--dry-run", "--remedy",
                                "--detach", "--force", "--ready-timeout"})


def _unknown_notes(module, program, unknown: list[str], version: str | None) -> list[str]:
    key = module.table_key(program) if hasattr(module, "table_key") else module.TABLE_KEY
    table = load_table(module.TABLE_PACKAGE, key)
    out = []
    newest = table.sampled_versions[-1] if table.sampled_versions else None
    if unknown and version and newest and _newer(version, newest):
        out.append(f"{module.ENGINE} {version} is newer than the newest version in servepilot's flag table ({newest}): "
                   "flags added since are reported as unknown")
    for name in dict.fromkeys(unknown):
        base = name.split(".")[0].split("=")[0]
        ranges = table.versions_of(base)
        if ranges and version:
            out.append(f"{base} is not a flag of {module.ENGINE} {version} (servepilot's table has it for "
                       f"{' or '.join(ranges)})")
        elif ranges:
            out.append(f"{base} is known only to other {module.ENGINE} versions ({' or '.join(ranges)})")
        else:
            sampled = table.sampled_versions
            where = f" (versions {sampled[0]} to {sampled[-1]} sampled)" if sampled else ""
            own = f" (servepilot's own {base} goes before `--`)" if base in SERVEPILOT_OPTIONS else ""
            out.append(f"{base} is not in servepilot's {module.ENGINE} flag table{where}; kept as typed{own}")
    return out


def _unrecognized(module, program, unknown: list[str], version: str | None) -> list[str]:
    """Unknown flags the engine's parser refuses, where servepilot can know that."""
    from servepilot.engines.registry import engine_record

    # Engines whose flag tables are extracted from their own argument parsers release by release
    # (python -m servepilot.engines.flaggen): for a release inside the sampled span, a flag
    # missing from the table is one argparse refuses ("error: unrecognized arguments: ...").
    if not engine_record(module.ENGINE).authoritative_flag_table or not version or not unknown:
        return []
    key = module.table_key(program) if hasattr(module, "table_key") else module.TABLE_KEY
    table = load_table(module.TABLE_PACKAGE, key)
    sampled = table.sampled_versions
    if not sampled or _newer(version, sampled[-1]) or _newer(sampled[0], version):
        return []  # outside what servepilot has read: flags may have been added since
    # Between two sampled releases a flag may have come or gone unseen: refuse only what
    # neither neighbouring sample has (for a sampled release itself, the table is exact).
    from servepilot.engines.knowledge import release_version, version_in

    v = release_version(version)
    below = max((s for s in sampled if release_version(s) <= v), key=release_version)
    above = min((s for s in sampled if release_version(s) >= v), key=release_version)
    out = []
    for name in dict.fromkeys(unknown):
        base = name.split(".")[0].split("=")[0]
        if base in SERVEPILOT_OPTIONS:
            continue  # reported as servepilot's own option typed after `--`
        ranges = table.versions_of(base)
        if any(version_in(s, r) for s in {below, above} for r in ranges):
            continue
        known = f" (it exists in {' or '.join(ranges)})" if ranges else ""
        out.append(f"{module.ENGINE} {version} has no {base} flag{known}: its parser stops with 'unrecognized "
                   f"arguments: {base}'")
    return out


def _newer(version: str, than: str) -> bool:
    from servepilot.engines.knowledge import release_version

    return release_version(version) > release_version(than)


# ---- vLLM --config file.yaml ----------------------------------------------------------------


def _config_options(module, args: list[str], shell: ShellContext, cwd, vt: VersionTable):
    """(path, parsed YAML options, notes) for `--config FILE` where the engine has it."""
    flag = getattr(module, "CONFIG_FLAG", None)
    if not flag:
        return None, None, []
    path = None
    for k, word in enumerate(args):
        if word == flag and k + 1 < len(args):
            path = args[k + 1]
        elif word.startswith(flag + "="):
            path = word.split("=", 1)[1]
    if path is None:
        return None, None, []
    full = Path(path) if Path(path).is_absolute() or cwd is None else Path(cwd) / path
    if shell.ssh_host and not full.exists():
        return path, None, [f"--config {path} is on {shell.ssh_host}; its options are not read"]
    if not str(path).endswith((".yaml", ".yml")):
        raise BadInput("vLLM reads --config files of type .yaml or .yml only", path=path)
    try:
        text = full.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(exc, "--config file", path) from None
    except OSError as exc:
        raise unreadable_file(exc, "--config file", path) from None
    import yaml  # lazy: keeps `servepilot --version` fast

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadInput(f"--config file is not valid YAML{_yaml_where(exc)}", path=path) from None
    if data is None:
        raise BadInput("--config file is empty", hint="vLLM needs a mapping of option: value", path=path)
    if not isinstance(data, dict):
        raise BadInput(f"--config file must be a mapping of option: value, not {type(data).__name__}", path=path)
    return path, parse_args(yaml_to_args(data), vt), []


def _yaml_where(exc) -> str:
    """" at line L, column C: problem" from a PyYAML error (its marks count from 0)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or exc.__class__.__name__
    if mark is None:
        return f": {problem}"
    return f" at line {mark.line + 1}, column {mark.column + 1}: {problem}"


def yaml_to_args(data: dict) -> list[str]:
    """Flatten a config mapping into argv the way vLLM's load_config_file does (v0.16.0):
    true -> `--key`, false -> nothing, list -> `--key a b`, mapping -> `--key '<json>'`."""
    out: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key)
        if isinstance(value, bool):
            if value:
                out.append(flag)
        elif isinstance(value, list):
            if value:
                out.append(flag)
                out.extend(str(v) for v in value)
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


# ---- rendering and changes ------------------------------------------------------------------


def render_command(launch: EngineLaunch) -> str:
    """An equivalent shell line: env prefix, nohup, the engine argv, redirections, ssh."""
    return render_shell(launch.argv, launch.shell)


def _module_for(launch: EngineLaunch) -> tuple[ModuleType, str, int]:
    found = detect_engine(launch.argv)
    if found is None:
        raise CommandLineError(f"not an engine command: {' '.join(launch.argv[:3])}")
    return found


def option_tokens(vt: VersionTable, dest: str, value, engine: str) -> list[str]:
    """The words that set `dest` to `value` on this engine version's command line."""
    name = vt.canonical_name(dest)
    if name is None:
        raise BadInput(f"{engine} {vt.version or ''} has no flag for {dest!r}".replace("  ", " "))
    spec = vt.by_name[name]
    if spec.kind in NO_VALUE_KINDS:
        if value:
            return [name]
        if spec.kind == "bool" and engine != "llama.cpp":
            return ["--no-" + name[2:]]
        negation = [n for n, s in vt.by_name.items() if s.dest == dest and s.kind == "negate"]
        return [negation[0]] if negation else []
    if spec.kind == "json":
        return [name, value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))]
    if spec.kind in ("list", "append"):
        items = value if isinstance(value, (list, tuple)) else [value]
        return [name, *(str(v) for v in items)]
    if spec.kind == "bool_value":
        return [name, "true" if value else "false"]
    if spec.kind == "optional" and value is True:
        return [name]
    return [name, str(value)]


def with_options(launch: EngineLaunch, set: dict | None = None, unset: Sequence[str] = ()) -> EngineLaunch:  # noqa: A002
    """The launch with options set (in place where already written, else appended) or removed.

    `set` maps dest names to values; `unset` lists dest names to drop from the command line.
    Values that come from a --config file can be overridden (the CLI wins) but not unset.
    """
    set = dict(set or {})  # noqa: A001
    module, program, skip = _module_for(launch)
    vt = _table(module, program, launch.engine_version)
    args = list(launch.argv[skip:])
    parsed: ParsedArgs = parse_args(args, vt)
    if hasattr(module, "rewrite_changes"):
        set, unset = module.rewrite_changes(set, list(unset), builtins.set(parsed.spans), launch.options)  # noqa: A001

    replacements: dict[int, list[str]] = {}
    dropped: builtins.set[int] = builtins.set()
    appended: list[str] = []
    for dest in unset:
        spans = parsed.spans.get(dest, [])
        if not spans and dest in launch.explicit and launch.config_file:
            raise BadInput(f"{dest} is set in the config file; edit it there", path=launch.config_file)
        for start, end in spans:
            dropped.update(range(start, end))
    for dest, value in set.items():
        if dest == module.MODEL_DEST and module.model_positional(program) and parsed.positional_spans:
            start, end = parsed.positional_spans[0]
            replacements[start] = [str(value)]
            dropped.update(range(start + 1, end))
            continue
        tokens = option_tokens(vt, dest, value, module.ENGINE)
        spans = parsed.spans.get(dest, [])
        if spans:
            first_start, first_end = spans[0]
            tokens = _keep_spelling(vt, args[first_start], dest, tokens)
            replacements[first_start] = tokens
            dropped.update(range(first_start + 1, first_end))
            for start, end in spans[1:]:
                dropped.update(range(start, end))
        else:
            appended += tokens
    new_args: list[str] = []
    for index, word in enumerate(args):
        if index in replacements:
            new_args += replacements[index]
        elif index not in dropped:
            new_args.append(word)
    new_args += appended
    new_argv = list(launch.argv[:skip]) + new_args
    return parse_argv(new_argv, launch.shell, engine_version=launch.engine_version)


def _keep_spelling(vt: VersionTable, typed: str, dest: str, tokens: list[str]) -> list[str]:
    """Keep the operator's spelling (`-m`, `-tp`) when a value flag is replaced in place."""
    name = typed.split("=", 1)[0]
    if "." in name or len(tokens) < 2 or name.startswith("-O"):
        return tokens
    spec, negated = vt.lookup(name)
    if spec is None or negated or spec.dest != dest or spec.kind in NO_VALUE_KINDS:
        return tokens
    return [name, *tokens[1:]]


def with_model(launch: EngineLaunch, new_model: str, served_model_name: str | None = None) -> EngineLaunch:
    """The launch serving `new_model` (e.g. an overlay directory), optionally under a name.

    Passing the old model id as `served_model_name` keeps clients that ask for it working.
    """
    module, program, _ = _module_for(launch)
    changes: dict = {module.MODEL_DEST: new_model}
    if served_model_name is not None:
        dest = module.served_name_dest(program) if hasattr(module, "served_name_dest") else module.SERVED_NAME_DEST
        changes[dest] = served_model_name
    return with_options(launch, changes)
