"""Lower layers never import higher ones (README's Layout), read from the source with ast.

Layer order, highest first: cli > runs > overlay > checks > planning > triage > engines >
hardware > checkpoint. deployment.py sits with engines/hardware/checkpoint, below checks;
multinode/ (the node_mismatch rules of a command set) sits with checks, whose Finding it makes.
Top-level helper modules (errors, settings, units, datafile, ...) are below every layer and
import none of them, except the ones listed in BASE_ALLOWED.
"""

import ast
from pathlib import Path

import servepilot

PACKAGE = Path(servepilot.__file__).parent
ORDER = ("cli", "runs", "overlay", "checks", "planning", "triage", "engines", "hardware", "checkpoint")
# deployment.py joins a parsed command, the GPUs and the checkpoint: it ranks with engines.
SAME_AS = {"deployment": "engines", "fix": "overlay", "multinode": "checks"}
# a top-level module that is not a layer ranks below all of them
BASE = len(ORDER)


def _rank(dotted: str) -> int | None:
    parts = dotted.split(".")
    if parts[0] != "servepilot" or len(parts) < 2:
        return None
    name = SAME_AS.get(parts[1], parts[1])
    return ORDER.index(name) if name in ORDER else BASE


def _rank_of_file(path: Path, package: Path) -> tuple[str, int]:
    rel = path.relative_to(package).with_suffix("")
    dotted = "servepilot." + ".".join(rel.parts)
    return dotted, _rank(dotted)


def _imports(path: Path, module: str):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                yield node.lineno, ".".join(base + ([node.module] if node.module else []))
            elif node.module:
                yield node.lineno, node.module


def layer_violations(package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        module, rank = _rank_of_file(path, package)
        for line, target in _imports(path, module):
            target_rank = _rank(target)
            if target_rank is not None and target_rank < rank:
                out.append(f"{path.relative_to(package)}:{line} imports {target}")
    return out


def test_no_lower_layer_imports_a_higher_one():
    assert layer_violations() == []


def test_the_check_itself_sees_an_upward_import(tmp_path):
    # The scan must be able to fail: an engines module importing checks is caught, a checks
    # module importing engines is not, and a relative import is resolved before it is ranked.
    fake = tmp_path / "servepilot"
    (fake / "engines").mkdir(parents=True)
    (fake / "checks").mkdir()
    (fake / "engines" / "bad.py").write_text("from servepilot.checks.registry import RULES\n")
    (fake / "engines" / "rel.py").write_text("from ..planning import plan\n")
    (fake / "checks" / "ok.py").write_text("from servepilot.engines import bad\n")
    assert layer_violations(fake) == ["engines/bad.py:1 imports servepilot.checks.registry",
                                      "engines/rel.py:1 imports servepilot.planning"]


def test_rules_read_the_resolution_not_the_fact_files():
    # engines/resolution.py promises that rules never re-derive engine behaviour: the fact
    # files are read in engines/ (resolve.py, release.py) and reach the rules as the Resolution.
    offenders = []
    for path in sorted((PACKAGE / "checks" / "rules").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("load_file", "rows_for", "row_for"):
                offenders.append(f"{path.name}:{node.lineno} {node.attr}")
    assert offenders == []
