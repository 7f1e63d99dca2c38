"""auto_map → the Python files that run under --trust-remote-code, with their sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path

from servepilot.checkpoint.spec import CodeFile, CustomCode

# Python files a checkpoint ships are kilobytes; hashing stops at this size so a hostile
# "module" cannot make inspect read gigabytes.
MAX_CODE_BYTES = 64 * 1024 * 1024


def _module_of(ref: str) -> str | None:
    """"configuration_kimi_k25.KimiK25Config" → "configuration_kimi_k25"; None for a
    reference into another repository ("org/repo--module.Class")."""
    if "--" in ref:
        return None
    module, _, _cls = ref.rpartition(".")
    return module or None


def _refs(auto_map: dict) -> list[str]:
    refs: list[str] = []
    for value in auto_map.values():
        # tokenizers map to [slow, fast] pairs, either of which may be null
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, str):
                refs.append(ref)
    return refs


def read_custom_code(config: dict, root: Path | None) -> tuple[CustomCode | None, list[str], list[str]]:
    """auto_map of the outer config and its text_config → (files with presence and sha256,
    notes, problems). A module path leaving the checkpoint is a problem, not read."""
    notes: list[str] = []
    problems: list[str] = []
    merged: dict = {}
    for where, d in (("config.json", config), ("config.json:text_config", config.get("text_config"))):
        am = d.get("auto_map") if isinstance(d, dict) else None
        if am is None:
            continue
        if not isinstance(am, dict):
            notes.append(f"{where} auto_map is {type(am).__name__}, not an object: ignored")
            continue
        for key, value in am.items():
            merged[key if where == "config.json" else f"text_config.{key}"] = value
    if not merged:
        return None, notes, problems

    files: list[CodeFile] = []
    seen: set[str] = set()
    for ref in _refs(merged):
        module = _module_of(ref)
        if module is None:
            name = ref.rpartition(".")[0]
            if name not in seen:
                seen.add(name)
                files.append(CodeFile(name=name, present=False))
                notes.append(f"auto_map entry {ref!r} points into another repository: not checked")
            continue
        name = module.replace(".", "/") + ".py"
        if name in seen:
            continue
        seen.add(name)
        files.append(_code_file(root, name, notes, problems))
    return CustomCode(auto_map=merged, files=tuple(files)), notes, problems


def _code_file(root: Path | None, name: str, notes: list[str], problems: list[str]) -> CodeFile:
    parts = Path(name).parts
    if Path(name).is_absolute() or ".." in parts:
        problems.append(f"auto_map module {name!r} points outside the checkpoint: not read")
        return CodeFile(name=name, present=False)
    if root is None:
        return CodeFile(name=name, present=False)
    path = root / name
    try:
        if not path.is_file():
            return CodeFile(name=name, present=False)
        if path.stat().st_size > MAX_CODE_BYTES:
            notes.append(f"{name} is over {MAX_CODE_BYTES:,} bytes: not hashed")
            return CodeFile(name=name, present=True)
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        notes.append(f"{name}: cannot read ({exc.strerror or exc})")
        return CodeFile(name=name, present=True)
    return CodeFile(name=name, present=True, sha256=digest.hexdigest())
