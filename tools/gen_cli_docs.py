"""Write docs/cli.md: every servepilot verb's --help, as click renders it (STYLE.md habit 14).

The text comes from click's own help formatter at a fixed width, so the file only changes when
a help text, an option or a verb changes. tests/test_cli_docs.py regenerates it in memory and
fails when the checked-in file is stale.

    python tools/gen_cli_docs.py          # rewrite docs/cli.md
    python tools/gen_cli_docs.py --check  # exit 1 if docs/cli.md is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "cli.md"
WIDTH = 88  # fixed: click would otherwise wrap to the terminal running the script
REGENERATE = "python tools/gen_cli_docs.py"

HEADER = f"""# servepilot command-line reference

Every verb's `--help`, generated from the commands themselves by `{REGENERATE}`;
do not edit by hand. `tests/test_cli_docs.py` fails when this file is out of date.
The JSON output of each verb is described in [json.md](json.md) and [json/](json/).
"""


def _help(command: click.Command, words: list[str], parent: click.Context | None) -> tuple[str, click.Context]:
    # The command's own context_settings (the root's "-h, --help") as `servepilot ... --help` applies them.
    settings = {**command.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}
    ctx = click.Context(command, info_name=words[-1], parent=parent, **settings)
    return command.get_help(ctx).rstrip() + "\n", ctx


def _sections(command: click.Command, words: list[str], parent: click.Context | None):
    """(title, help text) for `command` and, for a group, each of its subcommands in order."""
    text, ctx = _help(command, words, parent)
    yield " ".join(words), text
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            yield from _sections(command.get_command(ctx, name), [*words, name], ctx)


def render() -> str:
    """The whole of docs/cli.md, as a string."""
    from servepilot.cli.main import cli

    parts = [HEADER]
    for title, text in _sections(cli, ["servepilot"], None):
        parts.append(f"\n## {title}\n\n```text\n{text}```\n")
    return "".join(parts)


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
        if current != text:
            print(f"{DOC.relative_to(REPO)} is stale: run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(REPO)} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
