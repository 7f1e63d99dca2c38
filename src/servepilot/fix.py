"""Apply one remedy of a check: a changed command line, or a checkpoint overlay plus a changed
command line. Plan first (`plan_fix`), then `FixPlan.execute()` builds what is needed and
checks the new command again, so the operator sees the new verdict before launching.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from servepilot.checks.finding import Finding, Remedy
from servepilot.deployment import Deployment
from servepilot.engines.command import EngineLaunch
from servepilot.errors import BadInput
from servepilot.overlay.build import OverlayPlan

# kinds `fix` can apply; "hardware" (buy or move to other GPUs) it can only list
APPLICABLE_KINDS = ("flag", "overlay", "env", "upgrade")

# options that name the model to clients, per engine (dest names of their parsers; llama.cpp's
# own server says --alias, llama-cpp-python's server --model_alias)
SERVED_NAME_OPTIONS = {
    "vllm": ("served_model_name",),
    "sglang": ("served_model_name",),
    "llama.cpp": ("alias", "model_alias"),
}


@dataclass(frozen=True)
class RemedyOption:
    """One remedy of one finding, numbered as `--finding CODE --remedy N` selects it."""

    finding: str  # the finding's code
    finding_index: int  # position in the check's findings (codes may repeat)
    severity: str
    title: str
    number: int  # 1-based position in the finding's remedies
    kind: str
    change: str
    tradeoff: str
    applicable: bool
    why_not: str | None = None  # when not applicable here


@dataclass(frozen=True)
class FixPlan:
    """The chosen remedy and what applying it will do; nothing has been written yet."""

    old_command: str
    options: tuple[RemedyOption, ...]
    chosen: RemedyOption | None  # None: nothing to fix, or nothing servepilot can apply
    remedy: Remedy | None = None
    new_launch: EngineLaunch | None = field(default=None, metadata={"json": False})
    new_command: str | None = None
    overlay: OverlayPlan | None = None
    pip_command: str | None = None
    gpu: str | None = None  # re-check under the same assumptions as the first check
    engine_version: str | None = None

    @property
    def has_errors(self) -> bool:
        return any(o.severity == "error" for o in self.options)

    JSON_SCHEMA = "servepilot.fix/1"

    def to_json(self, result: FixResult | None = None, *, written: str | None = None, dry_run: bool = False) -> dict:
        """The JSON object of docs/json/fix.md (after "schema"), for this plan and, once it
        ran, its result; `written`: where --write put the script."""
        from servepilot.jsonable import to_jsonable

        overlay = None
        if self.overlay is not None:
            overlay = {
                "path": str(self.overlay.dest),
                "action": self.overlay.action,
                "placement": self.overlay.placement,
                "original": str(self.overlay.original),
                "patched": [p.path for p in self.overlay.patched],
                "link_count": self.overlay.link_count,
                "built": result is not None,
                "leftovers": list(self.overlay.leftovers),
            }
        return to_jsonable({
            "applied": self.chosen,
            "remedy": self.remedy,
            "dry_run": dry_run,
            "old_command": self.old_command,
            "new_command": self.new_command,
            "overlay": overlay,
            "pip_command": self.pip_command,
            "new_verdict": result.new_verdict if result else None,
            "new_findings": result.new_findings if result else [],
            "new_resolved": result.new_resolved if result else {},
            "written": written,
            "options": self.options,
        })

    def execute(self, measurements=None) -> FixResult:
        """Build the overlay (if any) and re-check the new command.

        measurements: Deployment -> the launch history's figures (runs.store.measurement_for),
        for the re-check's memory plan."""
        if self.chosen is None or self.new_command is None:
            raise BadInput("there is no applicable remedy to apply")
        overlay_path = self.overlay.execute() if self.overlay is not None else None
        # After an upgrade the command runs on the release the remedy names: check it there.
        version = upgrade_target(self.remedy) or self.engine_version
        checked = recheck(self.new_command, gpu=self.gpu, engine_version=version, measurements=measurements)
        return FixResult(
            applied=self.chosen,
            old_command=self.old_command,
            new_command=self.new_command,
            overlay=str(overlay_path) if overlay_path else None,
            overlay_action=self.overlay.action if self.overlay else None,
            pip_command=self.pip_command,
            new_verdict=checked.verdict if checked else None,
            new_findings=tuple(checked.findings) if checked else (),
            new_resolved=dict(checked.resolved) if checked else {},
        )


def upgrade_target(option) -> str | None:
    """The release an upgrade remedy moves to: the lower bound of its specifier (">=0.18.0")."""
    spec = ((getattr(option, "args", None) or {}).get("upgrade") or {}).get("specifier", "")
    for clause in spec.split(","):
        clause = clause.strip()
        if clause.startswith((">=", "==", "~=")):
            return clause[2:].strip()
    return None


@dataclass(frozen=True)
class FixResult:
    applied: RemedyOption
    old_command: str
    new_command: str
    overlay: str | None
    overlay_action: str | None  # "create" | "replace" | "reuse"
    pip_command: str | None
    new_verdict: str | None  # "pass" | "warn" | "fail"; None for upgrade remedies
    new_findings: tuple[Finding, ...] = ()
    new_resolved: dict = field(default_factory=dict)  # check's `resolved` for the new command


def plan_fix(
    dep: Deployment,
    findings: tuple[Finding, ...] | list[Finding],
    *,
    remedy_number: int | None = None,
    finding_code: str | None = None,
    dest: str | Path | None = None,
    replace: bool = False,
    gpu: str | None = None,
    engine_version: str | None = None,
) -> FixPlan:
    """Choose a remedy and work out the new command (and overlay plan) it leads to.

    Default choice: the top applicable remedy of the first error finding that has one.
    `remedy_number` (1-based) picks within that finding, or within `finding_code`'s.
    """
    from servepilot.engines.cmdline import render_command

    options = tuple(remedy_options(dep, findings))
    old_command = render_command(dep.launch)
    base = FixPlan(old_command=old_command, options=options, chosen=None, gpu=gpu, engine_version=engine_version)
    chosen = choose_remedy(options, remedy_number, finding_code)
    if chosen is None:
        return base
    remedy = list(findings)[chosen.finding_index].remedies[chosen.number - 1]
    new_launch, overlay, pip = _apply(dep, remedy, dest=dest, replace=replace)
    return dataclasses.replace(
        base,
        chosen=chosen,
        remedy=remedy,
        new_launch=new_launch,
        new_command=render_command(new_launch),
        overlay=overlay,
        pip_command=pip,
    )


def recheck(command: str, *, gpu: str | None, engine_version: str | None, measurements=None):
    """Check the new command as the operator would: from its rendered text, not our objects.

    Returns the CheckResult of `servepilot.checks.run_checks`.
    """
    from servepilot.checks import run_checks
    from servepilot.deployment import build_deployment

    dep = build_deployment(command=command, gpu=gpu, engine_version=engine_version, command_file=None)
    return run_checks(dep, measured=measurements(dep) if measurements else None)


def check_script_path(path: str | Path) -> Path:
    """BadInput unless a script can be written at `path`; called before an overlay is built,
    so a bad --write leaves nothing half done on disk."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise BadInput("cannot write the script: its directory does not exist", path=path)
    if path.is_dir():
        raise BadInput("cannot write the script: a directory has this name", path=path)
    if not os.access(parent, os.W_OK):
        raise BadInput("cannot write the script: its directory is not writable", path=path)
    return path


def write_script(path: str | Path, command: str, *, note: str) -> Path:
    """Save the new command as an executable shell script (atomically: tmp file + rename)."""
    path = check_script_path(path)
    text = f"#!/usr/bin/env bash\n# written by servepilot fix: {note}\n{command}\n"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    except OSError as exc:
        raise BadInput(f"cannot write the script ({exc.strerror})", path=path) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def remedy_options(dep: Deployment, findings) -> list[RemedyOption]:
    """Every remedy of every finding, numbered per finding, with whether fix can apply it here."""
    out = []
    for index, f in enumerate(findings):
        for i, r in enumerate(f.remedies, start=1):
            why_not = _why_not_applicable(dep, r)
            out.append(
                RemedyOption(
                    finding=f.code,
                    finding_index=index,
                    severity=f.severity,
                    title=f.title,
                    number=i,
                    kind=r.kind,
                    change=r.change,
                    tradeoff=r.tradeoff,
                    applicable=why_not is None,
                    why_not=why_not,
                )
            )
    return out


def _why_not_applicable(dep: Deployment, remedy: Remedy) -> str | None:
    if remedy.kind not in APPLICABLE_KINDS:
        return f"a {remedy.kind} remedy is for the operator to carry out"
    args = remedy.args or {}
    if remedy.kind == "flag" and not ("set" in args or "unset" in args):
        return "the remedy carries no flag values servepilot can apply"
    placeholders = [f"{k}={v}" for k, v in (args.get("set") or {}).items() if _is_placeholder(v)]
    if placeholders:
        return f"it needs a value only the operator knows ({', '.join(placeholders)})"
    if remedy.kind == "env" and not isinstance(args.get("env"), dict):
        return "the remedy carries no environment values servepilot can apply"
    if remedy.kind == "upgrade" and not isinstance(args.get("upgrade"), dict):
        return "the remedy names no package and version"
    if remedy.kind == "upgrade" and not args["upgrade"].get("specifier"):
        # a build (another CUDA wheel, a source build), not a release: pip install of the bare
        # package would reinstall the wheel the finding is about
        return "the remedy names a build, not a release servepilot can pip install"
    if remedy.kind == "overlay":
        if not isinstance(args.get("overlay"), dict) or not args["overlay"]:
            return "the remedy carries no patch"
        if dep.launch.shell.ssh_host:
            return f"the checkpoint is on {dep.launch.shell.ssh_host}; run fix there"
        from servepilot.checkpoint.remote import view_of

        remote = view_of(dep.spec.path) if dep.spec is not None else None
        if remote is not None:  # only headers were read: an overlay needs the real files
            return f"the model was read from the Hub (headers only); download it first: {remote.download_command}"
        if dep.spec is None or not Path(dep.spec.path).exists():
            return "the checkpoint directory is not readable here"
        if not Path(dep.spec.path).is_dir():
            return "the model is a single file; overlays patch checkpoint directories"
    return None


def _is_placeholder(value) -> bool:
    """"<path>"-style values: a remedy's template for the operator, not something to apply."""
    return isinstance(value, str) and len(value) > 2 and value.startswith("<") and value.endswith(">")


def choose_remedy(options: tuple[RemedyOption, ...], number: int | None, code: str | None) -> RemedyOption | None:
    """The option `--remedy number --finding code` selects; None when no error has one to apply."""
    if number is not None and number < 1:
        raise BadInput(f"--remedy {number}: remedies are numbered from 1")
    by_finding: dict[int, list[RemedyOption]] = {}
    for o in options:
        by_finding.setdefault(o.finding_index, []).append(o)
    if code is not None:
        matching = [mine for mine in by_finding.values() if mine[0].finding == code]
        if not matching:
            codes = sorted({o.finding for o in options})
            raise BadInput(f"--finding {code}: the check found no such finding with remedies (found: "
                           f"{', '.join(codes) or 'none'})")
        return _pick(matching[0], number, code)
    for mine in by_finding.values():
        if mine[0].severity == "error" and any(o.applicable for o in mine):
            return _pick(mine, number, mine[0].finding)
    return None


def _pick(mine: list[RemedyOption], number: int | None, code: str) -> RemedyOption | None:
    if number is None:
        return next((o for o in mine if o.applicable), None)
    if number > len(mine):
        raise BadInput(f"--remedy {number}: {code} has {len(mine)} remedies")
    chosen = mine[number - 1]
    if not chosen.applicable:
        raise BadInput(f"--remedy {number} of {code} ({chosen.change}) cannot be applied: {chosen.why_not}")
    return chosen


def _apply(dep: Deployment, remedy: Remedy, *, dest, replace: bool):
    """-> (new launch, overlay plan or None, pip command or None).

    Applied by the parts present in `args`, not by `kind` alone, so a remedy that combines
    them (an overlay plus `--max-model-len`, say) is applied whole: overlay first (it moves
    the model), then flags, then the environment.
    """
    from servepilot.engines.cmdline import with_model, with_options

    args = remedy.args or {}
    launch = dep.launch
    overlay = None
    pip = None
    if args.get("overlay"):
        from servepilot.overlay.build import plan_overlay

        overlay = plan_overlay(Path(dep.spec.path), args["overlay"], dest, replace=replace)
        launch = with_model(launch, str(overlay.dest), served_model_name(launch))
    if args.get("set") or args.get("unset"):
        launch = with_options(launch, dict(args.get("set") or {}), list(args.get("unset") or []))
    if isinstance(args.get("env"), dict):
        env = dict(launch.shell.env)
        env.update({str(k): str(v) for k, v in (args["env"].get("set") or {}).items()})
        for key in args["env"].get("unset") or []:
            env.pop(key, None)
        launch = dataclasses.replace(launch, shell=dataclasses.replace(launch.shell, env=env))
    if isinstance(args.get("upgrade"), dict) and args["upgrade"].get("specifier"):
        up = args["upgrade"]
        pip = f"pip install '{up.get('package', launch.engine)}{up.get('specifier', '')}'"
    return launch, overlay, pip


def served_model_name(launch: EngineLaunch) -> str | None:
    """The name to serve an overlay under: the model argument, unless the operator named it.

    Pointing the engine at an overlay changes the model path; without this the OpenAI API
    would start answering to "/models/x-servepilot-abc" and break every client. None when the
    command already sets a served name (vLLM allows several): `with_model` then keeps it.
    """
    if any(launch.options.get(dest) for dest in SERVED_NAME_OPTIONS.get(launch.engine, ())):
        return None
    return launch.model
