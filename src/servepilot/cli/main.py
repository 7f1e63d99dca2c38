"""The `servepilot` command: a lazy click group, and the one place errors become messages.

Each verb lives in its own module and is imported only when it runs, so `servepilot
--version` and `--help` stay fast (no rich, numpy, gguf or httpx at start-up).
"""

from __future__ import annotations

import importlib
import sys

import click

from servepilot import __version__

# verb -> (module, attribute, one-line help). Help is duplicated here so `--help` does not
# import every command module.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "inspect": ("servepilot.cli.inspect_cmd", "inspect", "Read a checkpoint's headers into a model spec."),
    "deployment": ("servepilot.cli.deployment_cmd", "deployment", "Show how servepilot understands an engine command "
                                                                  "line and the GPUs."),
    "check": ("servepilot.cli.check_cmd", "check", "Predict what the engine will do and whether the launch will fail."),
    "explain": ("servepilot.cli.check_cmd", "explain", "Show a rule's facts and their sources."),
    "plan": ("servepilot.cli.plan_cmd", "plan", "Per-GPU memory as the engine computes it."),
    "fix": ("servepilot.cli.fix_cmd", "fix", "Apply a remedy: a changed command, or a checkpoint overlay."),
    "overlay": ("servepilot.cli.fix_cmd", "overlay", "Status, diff or removal of a servepilot overlay."),
    "launch": ("servepilot.cli.runs_cmd", "launch", "Run the engine under supervision."),
    "ps": ("servepilot.cli.runs_cmd", "ps", "List runs and their live state."),
    "logs": ("servepilot.cli.runs_cmd", "logs", "Print (or follow) a run's server log."),
    "stop": ("servepilot.cli.runs_cmd", "stop", "Stop a run's own process group, safely."),
    "history": ("servepilot.cli.runs_cmd", "history", "Attempts per model and what changed between them."),
    "cleanup": ("servepilot.cli.runs_cmd", "cleanup", "List (and with --yes remove) engine leftovers in /dev/shm."),
    "triage": ("servepilot.cli.triage_cmd", "triage", "Find the root cause in an engine log."),
    "probe": ("servepilot.cli.probe_cmd", "probe", "Describe this node for a multi-node preflight (JSON)."),
    "preflight": ("servepilot.cli.preflight_cmd", "preflight", "Probe every node of a multi-node deployment and "
                                                               "compare with the plan."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        entry = COMMANDS.get(name)
        if entry is None:
            return None
        module, attr, _ = entry
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        rows = [(name, help_) for name, (_, _, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="servepilot")
def cli():
    """servepilot: serve a large checkpoint on vLLM, SGLang or llama.cpp on the first try.

    \b
    Typical session:
      servepilot inspect /models/kimi-k2.5-nvfp4
      servepilot check --gpu rtx-pro-6000x8 -- vllm serve /models/kimi-k2.5-nvfp4 -tp 8
      servepilot fix -- vllm serve /models/kimi-k2.5-nvfp4 -tp 8
      servepilot launch -- vllm serve /models/kimi-k2.5-nvfp4-overlay -tp 8

    Exit codes: 0 ok, 1 predicted failure / root cause found, 2 bad input, 3 launch failed,
    4 check cannot tell (verdict unknown), 70 internal error (a bug in servepilot).
    Set SERVEPILOT_DEBUG=1 for tracebacks.
    """


# EX_SOFTWARE from sysexits.h: outside the contract's 0-4, so a crash is never read as a verdict
INTERNAL_ERROR_EXIT = 70


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI and turn library errors into one line and an exit code."""
    from servepilot.errors import ServepilotError
    from servepilot.settings import debug_enabled

    try:
        rv = cli.main(args=argv, prog_name="servepilot", standalone_mode=False)
    except ServepilotError as exc:
        if debug_enabled():
            raise
        click.echo(f"servepilot: error: {exc.one_line()}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("servepilot: aborted", err=True)
        return 130
    except click.UsageError as exc:
        # one line, like every other bad input; the verb's --help is where to look next
        verb = exc.ctx.command_path if exc.ctx is not None else "servepilot"
        click.echo(f"servepilot: error: {exc.format_message()} (see '{verb} --help')", err=True)
        return 2
    except click.ClickException as exc:
        exc.show()
        return 2 if exc.exit_code == 1 else exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("servepilot: interrupted", err=True)
        return 130
    except Exception as exc:  # a bug in servepilot, not a verdict: never exit 1, which means "fails"
        if debug_enabled():
            raise
        click.echo(
            f"servepilot: internal error: {type(exc).__name__}: {exc} "
            "(a bug in servepilot, not a finding about your launch; SERVEPILOT_DEBUG=1 shows the traceback)",
            err=True,
        )
        return INTERNAL_ERROR_EXIT
    return rv if isinstance(rv, int) else 0


def run() -> None:
    sys.exit(main())
