"""Regenerate the `flags` rows of the engines' flag tables from the engines' own sources.

Maintainer tool, never run by the CLI. Reads source files only (AST or text), never imports an
engine. Adding an engine release = unpack its sdist, run this, review the diff of flags.json:

    python -m servepilot.engines.flaggen vllm 0.16.0=/tmp/vllm-0.16.0 0.18.0=/tmp/vllm-0.18.0 ...
    python -m servepilot.engines.flaggen sglang 0.5.10.post1=/tmp/sglang-0.5.10.post1 ...
    python -m servepilot.engines.flaggen llamacpp /tmp/llama.cpp/common/arg.cpp COMMIT
    python -m servepilot.engines.flaggen vllm-values 0.16.0=/tmp/vllm-0.16.0 ...   (choices, ranges)
    python -m servepilot.engines.flaggen sglang-values | llamacpp-values   (the universal rows)

Each version's directory is the unpacked sdist root (holding `vllm/` or `sglang/`). The other
keys of flags.json (defaults, parser, method) are kept as they are.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

# Type aliases the AST cannot see through: vllm/config/cache.py BlockSize is a Literal of ints;
# vllm/config/model.py HfOverrides is dict | Callable, parsed as JSON when it looks like one.
VLLM_KIND_OVERRIDES = {"block_size": "int", "hf_overrides": "json", "max_model_len": "human_int_or_auto",
                       "max_num_batched_tokens": "human_int", "kv_cache_memory_bytes": "human_int"}
# FrontendArgs fields whose argparse kwargs vLLM patches after get_kwargs (cli_args.py).
VLLM_FRONTEND_KINDS = {"allowed_origins": "json", "allowed_methods": "json", "allowed_headers": "json",
                       "default_chat_template_kwargs": "json", "middleware": "append", "lora_modules": "list",
                       "disable_access_log_for_endpoints": "str"}
# ServerArgs.from_cli_args copies these argparse dests to its own field names.
SGLANG_RENAME = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
                 "data_parallel_size": "dp_size", "expert_parallel_size": "ep_size"}


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return ast.unparse(node)


def _annotations(tree: ast.AST, class_name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    out[st.target.id] = ast.unparse(st.annotation)
    return out


def kind_from_annotation(dest: str, annotation: str) -> str:
    """The value kind vllm's _compute_kwargs gives a dataclass field of this type."""
    if dest in VLLM_KIND_OVERRIDES:
        return VLLM_KIND_OVERRIDES[dest]
    a = annotation.replace(" ", "").lower()
    if re.search(r"(^|[|\[(,])bool([|\]),]|$)", a):
        return "bool"
    if "config" in a or "dict" in a:
        return "json"
    if re.search(r"(^|[|\[,])(list|tuple|set)\[", a):
        return "list"
    if re.search(r"(^|[|\[,])int([|\],]|$)", a) and "str" not in a:
        return "int"
    if re.search(r"(^|[|\[,])float([|\],]|$)", a):
        return "float"
    return "str"


def _add_argument_calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            if any(n.startswith("--") for n in names):
                yield names, keywords


def _kind_from_call(keywords: dict, dest: str, annotations: dict[str, str]) -> str:
    action = _literal(keywords["action"]) if "action" in keywords else None
    if isinstance(action, str) and ("StoreTrue" in action or action == "store_true"):
        return "store_true"
    if action == "store_false":
        return "store_false"
    if isinstance(action, str) and "BooleanOptionalAction" in action:
        return "bool"
    if "nargs" in keywords and _literal(keywords["nargs"]) in ("+", "*"):
        return "list"
    if "nargs" in keywords and _literal(keywords["nargs"]) == "?":
        return "optional"  # `--hf-token` alone or `--hf-token VALUE`
    if "type" in keywords:
        t = ast.unparse(keywords["type"])
        if "human_readable_int_or_auto" in t:
            return "human_int_or_auto"
        if "human_readable_int" in t:
            return "human_int"
        if t == "int" or t.endswith("check_port"):
            return "int"
        if t == "float":
            return "float"
        if "json" in t.lower():
            return "json"
        if t == "str" or "optional_type(str)" in t or "nullable_str" in t:
            return "str"
    if dest in annotations:
        return kind_from_annotation(dest, annotations[dest])
    return "str"


def _cli_args_file(root: Path) -> Path:
    for rel in ("vllm/entrypoints/openai/cli_args.py", "vllm/entrypoints/common/cli_args.py"):
        if (root / rel).exists():
            return root / rel
    raise FileNotFoundError(f"no cli_args.py under {root}")


def vllm_flags_of(root: Path) -> dict[str, tuple[str, str, str]]:
    """name -> (dest, kind, source file) for one unpacked vLLM sdist."""
    files = [root / "vllm/engine/arg_utils.py", _cli_args_file(root)]
    trees = {f: ast.parse(f.read_text(encoding="utf-8")) for f in files}
    annotations: dict[str, str] = {}
    for tree in trees.values():
        for cls in ("EngineArgs", "BaseFrontendArgs", "FrontendArgs"):
            annotations.update(_annotations(tree, cls))
    rows: dict[str, tuple[str, str, str]] = {}
    for f, tree in trees.items():
        rel = str(f.relative_to(root))
        for names, keywords in _add_argument_calls(tree):
            longs = [n for n in names if n.startswith("--")]
            dest = _literal(keywords["dest"]) if "dest" in keywords else longs[0][2:].replace("-", "_")
            if not isinstance(dest, str):
                continue
            kind = _kind_from_call(keywords, dest, annotations)
            for n in names:
                if n.startswith("-"):
                    rows.setdefault(n, (dest, kind, rel))
    cli = _cli_args_file(root)
    text = cli.read_text(encoding="utf-8")
    if "get_kwargs(FrontendArgs)" in text or "get_kwargs(cls)" in text:  # flags made from field names
        tree = trees[cli]
        front = _annotations(tree, "BaseFrontendArgs") | _annotations(tree, "FrontendArgs")
        for dest, annotation in front.items():
            kind = VLLM_FRONTEND_KINDS.get(dest) or kind_from_annotation(dest, annotation)
            rows.setdefault("--" + dest.replace("_", "-"), (dest, kind, str(cli.relative_to(root))))
    return rows


def sglang_flags_of(root: Path) -> dict[str, tuple[str, str, str]]:
    rel = "sglang/srt/server_args.py"
    tree = ast.parse((root / rel).read_text(encoding="utf-8"))
    rows: dict[str, tuple[str, str, str]] = {}
    for names, keywords in _add_argument_calls(tree):
        longs = [n for n in names if n.startswith("--")]
        dest = _literal(keywords["dest"]) if "dest" in keywords else longs[0][2:].replace("-", "_")
        if not isinstance(dest, str):
            continue
        kind = _kind_from_call(keywords, dest, {})
        dest = SGLANG_RENAME.get(dest, dest)
        for n in names:
            if n.startswith("-"):
                rows.setdefault(n, (dest, kind, rel))
    return rows


def rows_over_versions(per_version: dict[str, dict[str, tuple[str, str, str]]], prefix: str = "") -> list[dict]:
    """One row per name and run of sampled versions with the same (dest, kind)."""
    from packaging.version import Version

    versions = sorted(per_version, key=Version)
    out: list[dict] = []
    for name in sorted({n for rows in per_version.values() for n in rows}):
        runs: list[dict] = []
        for i, v in enumerate(versions):
            row = per_version[v].get(name)
            key = row[:2] if row else None
            if runs and runs[-1]["key"] == key and runs[-1]["end"] == i - 1:
                runs[-1].update(end=i, last=(row, v))
            else:
                runs.append({"key": key, "start": i, "end": i, "last": (row, v)})
        for run in runs:
            if run["key"] is None:
                continue
            clauses = []
            if run["start"] > 0:
                clauses.append(f">={versions[run['start']]}")
            if run["end"] < len(versions) - 1:
                clauses.append(f"<{versions[run['end'] + 1]}")
            (dest, kind, rel), v = run["last"]
            out.append({"name": name, "dest": dest, "kind": kind, "versions": ",".join(clauses),
                        "source": f"{prefix}{rel}@v{v}"})
    return out


def llamacpp_rows(arg_cpp: Path, commit: str) -> list[dict]:
    """common_arg({names}, [{negative names}], ...): the kind is the handler's parameter type."""
    src = arg_cpp.read_text(encoding="utf-8")
    rows: dict[str, dict] = {}
    for m in re.finditer(r"common_arg\(\s*", src):
        i = m.end()
        groups = []
        while (g := re.match(r"\{([^{}]*)\}\s*,\s*", src[i:])) and '"' in g.group(1):
            groups.append(re.findall(r'"([^"]+)"', g.group(1)))
            i += g.end()
        lam = re.search(r"\[\]\s*\(([^)]*)\)", src[i : i + 4000])
        if not groups or not lam:
            continue
        params = lam.group(1)
        kind = ("bool" if "bool value" in params else "int" if "int value" in params
                else "float" if re.search(r"(float|double) value", params) else "pair" if "value2" in params
                else "str" if "value" in params else "store_true")
        names = [n for n in groups[0] if n.startswith("-")]  # bare names are preset-only keys
        longs = [n for n in names if n.startswith("--")]
        if not names:
            continue
        dest = (longs[-1] if longs else names[-1]).lstrip("-").replace("-", "_")
        source = f"common/arg.cpp@{commit[:10]}#L{src[: m.start()].count(chr(10)) + 1}"
        for n in names:
            rows.setdefault(n, {"name": n, "dest": dest, "kind": kind, "versions": "", "source": source})
        for n in (groups[1] if len(groups) > 1 else []):
            if n.startswith("-"):
                rows.setdefault(n, {"name": n, "dest": dest, "kind": "negate", "versions": "", "source": source})
    out = sorted(rows.values(), key=lambda r: r["name"])
    for r in out:
        if r["dest"] == "n_gpu_layers":
            r["kind"] = "int_or_str"  # a number, or 'auto' / 'all'
    return out


# ---- value rules: choices and ranges ----------------------------------------------------

# Choices vLLM enforces even where the field's type also admits `str` (argparse then shows a
# metavar, not choices): ModelConfig._verify_quantization refuses an unknown method.
VLLM_VERIFIED_CHOICES = {"quantization": "vllm/config/model.py"}
# Facts that hold for every release, read once and cited (not derivable from one field).
UNIVERSAL_VALUE_ROWS = {
    "vllm": [
        {"dest": "port", "min": 0, "max": 65535, "versions": "",
         "source": "https://docs.python.org/3/library/socket.html (bind: port must be 0-65535; "
                   "vllm/entrypoints/openai/api_server.py@v0.16.0 create_server_socket binds it)"},
        {"dest": "tensor_parallel_size", "min": 1, "versions": "",
         "source": "vllm/config/parallel.py@v0.16.0 (world_size = pipeline_parallel_size * "
                   "tensor_parallel_size; 0 ranks leave nothing to place the model on)"},
        {"dest": "pipeline_parallel_size", "min": 1, "versions": "",
         "source": "vllm/config/parallel.py@v0.16.0 (world_size = pipeline_parallel_size * "
                   "tensor_parallel_size)"},
    ],
    "sglang": [
        {"dest": "port", "min": 0, "max": 65535, "versions": "",
         "source": "https://docs.python.org/3/library/socket.html (bind: port must be 0-65535)"},
        {"dest": "tp_size", "min": 1, "versions": "",
         "source": "python/sglang/srt/server_args.py@v0.5.10.post1 (tp_size ranks per node)"},
    ],
    "llamacpp": [
        {"dest": "port", "min": 0, "max": 65535, "versions": "",
         "source": "https://pubs.opengroup.org/onlinepubs/9699919799/basedefs/netinet_in.h.html "
                   "(in_port_t is 16 bits; llama-server binds --port with httplib)"},
    ],
}


def _literal_values(node: ast.AST, aliases: dict[str, list]) -> list | None:
    """The values of `Literal[...]`, of an alias of one, or of a `|` union of those."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _literal_values(node.left, aliases), _literal_values(node.right, aliases)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Literal", "typing.Literal"):
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        values = [_literal(e) for e in elts]
        return values if all(isinstance(v, (str, int, float)) for v in values) else None
    return None


def _literal_aliases(files: list[Path], root: Path) -> dict[str, tuple[list, str]]:
    """Module-level `Name = Literal[...]` (or `Name: TypeAlias = ...`): name -> (values, file)."""
    out: dict[str, tuple[list, str]] = {}
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for st in tree.body:
            target = value = None
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                target, value = st.targets[0].id, st.value
            elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
                target, value = st.target.id, st.value
            if target is None:
                continue
            values = _literal_values(value, {k: v for k, (v, _) in out.items()})
            if values:
                out[target] = (values, str(f.relative_to(root)))
    return out


def _field_bounds(files: list[Path], root: Path) -> dict[tuple[str, str], tuple[dict, str]]:
    """`x: T = Field(default=..., gt=0, le=1)` in config classes: (class, field) -> bounds."""
    out: dict[tuple[str, str], tuple[dict, str]] = {}
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for st in cls.body:
                if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                        and isinstance(st.value, ast.Call) and ast.unparse(st.value.func) == "Field"):
                    continue
                bounds = {k.arg: _literal(k.value) for k in st.value.keywords if k.arg in ("gt", "ge", "lt", "le")}
                if bounds and all(isinstance(v, (int, float)) for v in bounds.values()):
                    out[(cls.name, st.target.id)] = (bounds, str(f.relative_to(root)))
    return out


def vllm_values_of(root: Path) -> dict[str, tuple[dict, str]]:
    """dest -> (rule, source file): the choices of Literal-typed EngineArgs fields and the
    pydantic bounds of the config field each one defaults from (`= CacheConfig.x`)."""
    config_files = sorted((root / "vllm/config").glob("*.py"))
    quant = root / "vllm/model_executor/layers/quantization/__init__.py"
    aliases = _literal_aliases(config_files + ([quant] if quant.exists() else []), root)
    bounds = _field_bounds(config_files, root)
    args = root / "vllm/engine/arg_utils.py"
    tree = ast.parse(args.read_text(encoding="utf-8"))
    alias_values = {k: v for k, (v, _) in aliases.items()}
    out: dict[str, tuple[dict, str]] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "EngineArgs"):
        for st in cls.body:
            if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                continue
            dest = st.target.id
            parts = [p.strip() for p in ast.unparse(st.annotation).split("|")]
            typed = [p for p in parts if p != "None"]
            named = [p for p in typed if p in aliases]
            if named and (len(named) == len(typed)
                          or (dest in VLLM_VERIFIED_CHOICES and set(typed) - set(named) == {"str"})):
                choices = [v for p in named for v in alias_values[p]]
                src = VLLM_VERIFIED_CHOICES.get(dest) if "str" in typed else aliases[named[0]][1]
                out[dest] = ({"choices": choices}, src)
            if isinstance(st.value, ast.Attribute) and isinstance(st.value.value, ast.Name):
                found = bounds.get((st.value.value.id, st.value.attr))
                if found:
                    rule = dict(out.get(dest, ({}, ""))[0]) | found[0]
                    out[dest] = (rule, found[1])
    return out


def value_rows_over_versions(per_version: dict[str, dict[str, tuple[dict, str]]], prefix: str = "") -> list[dict]:
    """One row per dest and run of sampled versions with the same rule."""
    from packaging.version import Version

    versions = sorted(per_version, key=Version)
    out: list[dict] = []
    for dest in sorted({d for rows in per_version.values() for d in rows}):
        runs: list[dict] = []
        for i, v in enumerate(versions):
            found = per_version[v].get(dest)
            key = json.dumps(found[0], sort_keys=True) if found else None
            if runs and runs[-1]["key"] == key and runs[-1]["end"] == i - 1:
                runs[-1].update(end=i, last=(found, v))
            else:
                runs.append({"key": key, "start": i, "end": i, "last": (found, v)})
        for run in runs:
            if run["key"] is None:
                continue
            # The first sampled version bounds the range below too: older releases were not read.
            clauses = [f">={versions[run['start']]}"]
            if run["end"] < len(versions) - 1:
                clauses.append(f"<{versions[run['end'] + 1]}")
            (rule, rel), v = run["last"]
            out.append({"dest": dest, **rule, "versions": ",".join(clauses), "source": f"{prefix}{rel}@v{v}"})
    return out


def update_table(path: Path, rows: list[dict], sampled: list[str] | None = None, key: str = "flags") -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data[key] = rows
    if sampled is not None:
        data["sampled_versions"] = sampled
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _set_key(path: Path, key: str, value) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data[key] = value
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str]) -> int:
    from packaging.version import Version

    engine, *rest = argv
    here = Path(__file__).parent
    if engine == "vllm-values":
        sources = {v: Path(p) for v, p in (a.split("=", 1) for a in rest)}
        rows = value_rows_over_versions({v: vllm_values_of(p) for v, p in sources.items()})
        table = here / "vllm" / "knowledge" / "flags.json"
        update_table(table, UNIVERSAL_VALUE_ROWS["vllm"] + rows, key="values")
        _set_key(table, "values_sampled_versions", sorted(sources, key=Version))
    elif engine in ("sglang-values", "llamacpp-values"):
        name = engine.split("-")[0]
        update_table(here / name / "knowledge" / "flags.json", UNIVERSAL_VALUE_ROWS[name], key="values")
    elif engine in ("vllm", "sglang"):
        sources = {v: Path(p) for v, p in (a.split("=", 1) for a in rest)}
        reader = vllm_flags_of if engine == "vllm" else sglang_flags_of
        prefix = "" if engine == "vllm" else "python/"
        rows = rows_over_versions({v: reader(p) for v, p in sources.items()}, prefix)
        update_table(here / engine / "knowledge" / "flags.json", rows, sorted(sources, key=Version))
    elif engine == "llamacpp":
        arg_cpp, commit = rest
        update_table(here / "llamacpp" / "knowledge" / "flags.json", llamacpp_rows(Path(arg_cpp), commit))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
