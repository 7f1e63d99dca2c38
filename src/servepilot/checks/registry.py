"""The rule table: one plain list of small pure functions, each (dep, ctx) -> list[Finding].

`@rule(code, category, title)` appends to RULES. Every module in `servepilot.checks.rules`
is imported once (pkgutil), so another engineer adds rules by adding a module, without
editing this one. `facts` and `sources` on a rule are what `servepilot explain CODE` prints.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

from servepilot.categories import check_category


@dataclass(frozen=True)
class Rule:
    code: str
    category: str
    title: str
    func: Callable
    facts: tuple[str, ...] = ()  # the engine behaviour the rule encodes, in words
    sources: tuple[str, ...] = ()  # where that behaviour was read (file@tag, PR URL) or knowledge files
    engines: tuple[str, ...] = ()  # empty: every engine
    module: str = field(default="", compare=False)
    # GPU platforms ("cuda", "rocm") whose facts the rule encodes; ANY_PLATFORM: facts of the
    # arguments, the model or memory arithmetic that hold everywhere; empty: written for CUDA,
    # so it does not run on another platform (fail closed; checks/platforms.py)
    platforms: tuple[str, ...] = ()


# A rule whose facts hold on every GPU platform: argument parsing, the model's own config and
# files, tensor/expert parallel and memory arithmetic, ports, llama.cpp's name tables per build.
ANY_PLATFORM = ("any",)

RULES: list[Rule] = []
_loaded = False


def rule(code: str, category: str, title: str, *, facts: tuple[str,
                                                               ...] = (), sources: tuple[str,
                                                                                         ...] = (),
         engines: tuple[str, ...] = (), platforms: tuple[str, ...] = ()):
    """Register the decorated function as a rule; the function is returned unchanged."""
    check_category(category)

    def register(func):
        if any(r.code == code and r.func is not func for r in RULES):
            raise ValueError(f"rule code {code} registered twice")
        RULES.append(Rule(code, category, title, func, tuple(facts), tuple(sources), tuple(engines), func.__module__,
                          tuple(platforms)))
        return func

    return register


def load_rules() -> list[Rule]:
    """Import every module of servepilot.checks.rules (once) and return the table."""
    global _loaded
    if not _loaded:
        from servepilot.checks import rules as package

        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            importlib.import_module(f"{package.__name__}.{info.name}")
        _loaded = True
    return list(RULES)


def find_rule(code: str) -> Rule | None:
    code = code.strip().upper()
    return next((r for r in load_rules() if r.code == code), None)


def knowledge_rows(r: Rule, version: str) -> list[dict]:
    """The rows of the rule's knowledge files that hold for `version` (for `explain`)."""
    from servepilot.engines import knowledge as kb

    out: list[dict] = []
    for source in r.sources:
        parts = source.split("/")
        if len(parts) != 5 or parts[:2] != ["servepilot",
                                            "engines"] or parts[3] != "knowledge" or not parts[4].endswith(".yaml"):
            continue
        engine, name = parts[2], parts[4][:-5]
        _walk(kb.load_file(engine, name), f"{engine}/knowledge/{name}.yaml", "", version, out)
    return out


def _walk(node, file: str, path: str, version: str, out: list[dict]) -> None:
    from servepilot.engines import knowledge as kb

    if isinstance(node, kb.KnowledgeFile):
        node = dict(node.items())
    if isinstance(node, (list, tuple)) and node and all(isinstance(x, kb.KnowledgeRow) for x in node):
        row = kb.row_for(node, version)
        if row is not None:
            facts = {k: v for k, v in row.data.items() if k not in ("versions", "source")}
            out.append({"file": file, "path": path or "/", "versions": row.versions, "source": row.source,
                        "facts": facts})
        return
    if isinstance(node, dict):
        for key, value in node.items():
            _walk(value, file, f"{path}.{key}" if path else str(key), version, out)
