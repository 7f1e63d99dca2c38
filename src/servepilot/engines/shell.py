"""Find the engine command inside a shell line or script, and what surrounds it.

Handles what operators paste from shell history and scripts: leading `KEY=VAL`, `export`,
`env K=V`, `nohup`, `exec`, `ssh [opts] HOST '...'` (the quoted command is parsed again),
redirections (`> f 2>&1`, `>>`, `2>`, `&>`), a trailing `&`, `cmd; echo ...` / `&& ...` /
`| tee f` tails, `pkill ...; sleep 3;` prefixes, backslash-newline continuations and comments.

Quoting follows POSIX sh (what `shlex` implements); the tokenizer is our own because shlex
cannot tell `2>&1` from `2 >&1`, which decides whether "2" is a flag value.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from servepilot.engines.command import ShellContext
from servepilot.errors import CommandLineError, not_utf8, unreadable_file

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_SEPARATORS = (";", "&&", "||", "|", "&", "\n")
# ssh options that take an argument (OpenSSH ssh(1) synopsis).
_SSH_ARG_OPTIONS = set("BbcDEeFIiJLlmOoPpQRSWw")
_WRAPPERS = ("nohup", "exec", "time", "command")
_SHELLS = ("bash", "sh", "zsh", "dash")
# sudo(8) options that take an argument.
_SUDO_ARG_OPTIONS = {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"}


@dataclass(frozen=True)
class Token:
    kind: str  # "word" | "op"
    text: str  # a word without its quotes, or the operator ("2>&", ">>", ";", "\n", ...)
    start: int  # span in the source text
    end: int
    expandable: bool = True  # False when any part was single-quoted


@dataclass
class Statement:
    tokens: list[Token]
    separator: str  # the operator that ended it ("" at the end of input)
    source: str  # the statement's text as written (for prefixes and tails)


@dataclass(frozen=True)
class ShellSplit:
    """The engine's own words, and the shell context around them."""

    argv: tuple[str, ...]
    context: ShellContext
    notes: tuple[str, ...] = ()


class ShellSyntaxError(CommandLineError):
    pass


def tokenize(text: str) -> list[Token]:
    """Split shell text into words and operators (POSIX quoting, comments, continuations)."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r":
            i += 1
            continue
        if c == "\\" and text.startswith("\n", i + 1):
            i += 2
            continue
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "\n":
            tokens.append(Token("op", "\n", i, i + 1))
            i += 1
            continue
        op = _operator_at(text, i)
        if op:
            tokens.append(Token("op", op, i, i + len(op)))
            i += len(op)
            continue
        if c == "(":
            # A subshell or `( ... )` grouping: its words would be read with the parentheses
            # in them (the model "m)" of "(cd /x && vllm serve m)").
            raise ShellSyntaxError(
                f"subshell ( ... ) grouping is not supported: {_excerpt(text, i)}",
                hint="write the command without the parentheses (servepilot honours a leading `cd DIR &&`)",
            )
        word, i, expandable = _read_word(text, i)
        tokens.append(Token("word", word[0], word[1], i, expandable))
    return tokens


def _operator_at(text: str, i: int) -> str | None:
    m = re.match(r"\d*>>|\d*>&|\d*>|&>>|&>|<|&&|\|\||\||;|&", text[i:])
    if not m:
        return None
    op = m.group(0)
    if op[0].isdigit() and i > 0 and not text[i - 1].isspace() and text[i - 1] not in ";&|":
        return None  # "abc2>" is a word followed by ">", handled when the word is read
    return op


def _read_word(text: str, i: int) -> tuple[tuple[str, int], int, bool]:
    start = i
    out: list[str] = []
    expandable = True
    n = len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n;&|<>":
            break
        if c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                raise ShellSyntaxError(f"unterminated single quote in: {_excerpt(text, start)}")
            out.append(text[i + 1 : j])
            expandable = False
            i = j + 1
            continue
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n and text[i + 1] in '"\\$`\n':
                    if text[i + 1] != "\n":
                        out.append(text[i + 1])
                    i += 2
                    continue
                out.append(text[i])
                i += 1
            if i >= n:
                raise ShellSyntaxError(f"unterminated double quote in: {_excerpt(text, start)}")
            i += 1
            continue
        if c == "\\" and i + 1 < n:
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return ("".join(out), start), i, expandable


def _excerpt(text: str, start: int) -> str:
    snippet = " ".join(text[start : start + 60].split())
    return snippet + ("..." if len(text) - start > 60 else "")


def statements(text: str) -> list[Statement]:
    """Tokens grouped into simple commands, each with the operator that ended it."""
    out: list[Statement] = []
    current: list[Token] = []
    for tok in tokenize(text):
        if tok.kind == "op" and tok.text in _SEPARATORS:
            if current:
                out.append(Statement(current, tok.text, text[current[0].start : current[-1].end]))
                current = []
            elif out and tok.text != "\n" and not out[-1].separator.strip():
                out[-1].separator = tok.text
            continue
        current.append(tok)
    if current:
        out.append(Statement(current, "", text[current[0].start : current[-1].end]))
    return out


def command_text(command: str | Sequence[str]) -> str:
    """Shell text for a command given as one string, or as argv words (from after `--`).

    One word with spaces or shell operators in it is a whole shell line (it was quoted to
    get past the operator's own shell); several words are quoted back exactly.
    """
    if isinstance(command, str):
        return command
    words = list(command)
    if len(words) == 1:
        return words[0]
    return " ".join(shlex.quote(w) for w in words)


def read_command_file(path: str) -> str:
    """The text of a launch script (`--command-file`); BadInput naming the file if unreadable."""
    from pathlib import Path

    from servepilot.errors import BadInput

    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise unreadable_file(exc, "command file", path) from None
    if b"\0" in data[:4096]:
        raise BadInput("command file is binary, not a shell script", path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(exc, "command file", path) from None


def split_shell_line(text: str, is_engine: Callable[[Sequence[str]], bool]) -> ShellSplit:
    """Find the first engine command in `text` and describe the shell around it."""
    if not text.strip():
        raise CommandLineError("empty command: give the engine command after `--` or with --command-file")
    stmts = statements(text)
    if not stmts:
        raise CommandLineError("no command: only comments and blank lines")
    variables: dict[str, str] = {}
    exported: dict[str, str] = {}
    for index, stmt in enumerate(stmts):
        found = _engine_statement(stmt, is_engine, variables, exported)
        if found is None:
            _learn_assignments(stmt, variables, exported)
            continue
        if isinstance(found, ShellSplit):  # an ssh command: the engine is on the remote host
            outer = [s.source for k, s in enumerate(stmts) if k != index]
            notes = found.notes + ((f"local commands around the ssh command are not kept: {'; '.join(outer)}",)
                                  if outer else ())
            return replace(found, notes=notes)
        argv, ctx = found
        prefix = tuple(_with_separator(s) for s in stmts[:index])
        tail = tuple(_tail_text(stmts, k) for k in range(index + 1, len(stmts)))
        ctx = replace(ctx, prefix_commands=prefix, tail=tail, background=stmt.separator == "&")
        ctx = _nohup_log(_tee_log(stmts, index, ctx), piped=stmt.separator == "|")
        return ShellSplit(tuple(argv), ctx)
    words = [t.text for t in stmts[0].tokens if t.kind == "word"]
    programs = [w for w in words if not _ASSIGNMENT.match(w) and w not in ("env", "sudo", *_WRAPPERS)]
    first = programs[0] if programs else (words[0] if words else "")
    hint = "expected e.g. `vllm serve MODEL`, `python -m sglang.launch_server`, `llama-server -m FILE`"
    if PurePosixPath(first).name in _SHELLS and len(programs) > 1 and not programs[1].startswith("-"):
        hint = f"to read the script, pass --command-file {programs[1]}"
    raise CommandLineError(f"no vLLM, SGLang or llama.cpp server command found (first program: {first!r})", hint=hint)


def _with_separator(stmt: Statement) -> str:
    sep = stmt.separator if stmt.separator not in ("", "\n") else ";"
    return f"{stmt.source}{sep}" if sep in (";", "&") else f"{stmt.source} {sep}"


def _tail_text(stmts: list[Statement], k: int) -> str:
    """A statement after the engine's: the operator joining it to the one before (`&&`, `||`,
    `|`) in front, and its own terminator (`;` or `&`) behind, so the pieces re-join exactly."""
    joiner = stmts[k - 1].separator
    text = stmts[k].source
    if joiner in ("&&", "||", "|"):
        text = f"{joiner} {text}"
    own = stmts[k].separator
    if k + 1 < len(stmts) and own in (";", "\n"):
        text += ";"
    elif own == "&":
        text += " &"
    return text


def _tee_log(stmts: list[Statement], index: int, ctx: ShellContext) -> ShellContext:
    """`engine ... 2>&1 | tee [-a] FILE`: FILE is the log the operator reads."""
    if stmts[index].separator != "|" or index + 1 >= len(stmts):
        return ctx
    words = [t.text for t in stmts[index + 1].tokens if t.kind == "word"]
    if not words or words[0] != "tee":
        return ctx
    files = [w for w in words[1:] if not w.startswith("-")]
    if not files:
        return ctx
    append = any(w in ("-a", "--append") for w in words[1:])
    stderr = ctx.stderr_file if ctx.stderr_file != "&1" else files[0]
    return replace(ctx, stdout_file=files[0], stderr_file=stderr, append=append)


def _nohup_log(ctx: ShellContext, piped: bool) -> ShellContext:
    """Where the output goes without a redirection: nohup(1) appends it to ./nohup.out (and
    stderr with it), so an old nohup.out still holds earlier launches' lines."""
    if ctx.stderr_file == "&1" and (ctx.stdout_file is None and not piped):
        ctx = replace(ctx, stderr_file=None)
    if ctx.nohup and ctx.stdout_file is None and not piped:
        ctx = replace(ctx, stdout_file="nohup.out", append=True, stderr_file=ctx.stderr_file or "nohup.out")
    return ctx


def _learn_assignments(stmt: Statement, variables: dict, exported: dict) -> None:
    words = [t.text for t in stmt.tokens if t.kind == "word"]
    if words and words[0] == "export":
        for w in words[1:]:
            if _ASSIGNMENT.match(w):
                k, v = w.split("=", 1)
                variables[k] = exported[k] = _expand(v, variables)
        return
    if words and all(_ASSIGNMENT.match(w) for w in words):
        for w in words:
            k, v = w.split("=", 1)
            variables[k] = _expand(v, variables)


def _expand(word: str, variables: dict) -> str:
    """Substitute $NAME / ${NAME} that the script itself set; leave the rest as written."""

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return variables.get(name, m.group(0))

    return _VARIABLE.sub(sub, word)


def _engine_statement(stmt: Statement, is_engine, variables: dict, exported: dict):
    """(argv, ShellContext) when `stmt` runs an engine, a ShellSplit for ssh, else None."""
    env: dict[str, str] = dict(exported)
    words: list[Token] = []
    redirects: list[tuple[str, str]] = []
    toks = stmt.tokens
    k = 0
    while k < len(toks):
        tok = toks[k]
        if tok.kind == "op":
            target = toks[k + 1].text if k + 1 < len(toks) and toks[k + 1].kind == "word" else ""
            redirects.append((tok.text, target))
            k += 2
            continue
        words.append(tok)
        k += 1
    texts = [_expand(t.text, variables) if t.expandable else t.text for t in words]

    nohup = False
    wrappers: list[str] = []
    pos = 0
    while pos < len(texts):
        w = texts[pos]
        if _ASSIGNMENT.match(w):
            key, value = w.split("=", 1)
            env[key] = value
            pos += 1
        elif w == "env":
            pos += 1
            while pos < len(texts) and (texts[pos].startswith("-") or _ASSIGNMENT.match(texts[pos])):
                if _ASSIGNMENT.match(texts[pos]):
                    key, value = texts[pos].split("=", 1)
                    env[key] = value
                elif texts[pos] in ("-u", "--unset") and pos + 1 < len(texts):
                    env.pop(texts[pos + 1], None)
                    pos += 1
                pos += 1
        elif w in _WRAPPERS:
            if w == "nohup":
                nohup = True
            else:
                wrappers.append(w)
            pos += 1
        elif w == "sudo":
            start = pos
            pos += 1
            while pos < len(texts) and texts[pos].startswith("-"):
                pos += 2 if texts[pos] in _SUDO_ARG_OPTIONS else 1
            wrappers.extend(texts[start:pos])
        else:
            break
    argv = texts[pos:]
    if not argv:
        return None
    if argv[0] == "ssh":
        return _ssh(argv[1:], is_engine)
    if PurePosixPath(argv[0]).name in _SHELLS:
        return _shell_c(argv, is_engine)
    container = None
    if not is_engine(argv):
        from servepilot.engines.manifests import wrapped_engine  # docker run, compose, kubectl

        wrapped = wrapped_engine(argv, is_engine, env)
        if wrapped is None:
            return None
        argv, container = wrapped
    ctx = ShellContext(env=env, nohup=nohup, wrappers=tuple(wrappers), container=container, **_redirections(redirects))
    return argv, ctx


def _redirections(redirects: list[tuple[str, str]]) -> dict:
    out: dict = {"stdout_file": None, "stderr_file": None, "append": False}
    for op, target in redirects:
        fd = op.rstrip(">&") or "1"
        if op.startswith("&>"):
            out["stdout_file"] = out["stderr_file"] = target
            out["append"] = op == "&>>"
        elif op.endswith(">&"):
            if fd == "2" and target == "1":
                out["stderr_file"] = out["stdout_file"] or "&1"
            elif fd == "1" and target == "2":
                out["stdout_file"] = out["stderr_file"]
        elif fd == "1":
            out["stdout_file"] = target
            out["append"] = op.endswith(">>")
        elif fd == "2":
            out["stderr_file"] = target
    return out


def _shell_c(argv: list[str], is_engine) -> ShellSplit | None:
    """`bash -lc 'SCRIPT'` (container and Kubernetes commands): SCRIPT is parsed again."""
    k = 1
    while k < len(argv) and argv[k].startswith("-") and "c" not in argv[k][1:]:
        k += 1
    if k + 1 >= len(argv) or not argv[k].startswith("-") or "c" not in argv[k][1:]:
        return None
    inner = split_shell_line(argv[k + 1], is_engine)
    return ShellSplit(inner.argv, replace(inner.context, shell_wrapper=tuple(argv[: k + 1])), inner.notes)


def _ssh(args: list[str], is_engine) -> ShellSplit | None:
    options: list[str] = []
    k = 0
    while k < len(args) and args[k].startswith("-"):
        opt = args[k]
        options.append(opt)
        if len(opt) == 2 and opt[1] in _SSH_ARG_OPTIONS and k + 1 < len(args):
            options.append(args[k + 1])
            k += 1
        k += 1
    if k >= len(args):
        return None
    host, remote = args[k], args[k + 1 :]
    if not remote:
        return None
    # ssh joins its remaining arguments with spaces and the remote shell parses the result.
    inner = split_shell_line(" ".join(remote), is_engine)
    ctx = replace(inner.context, ssh_host=host, ssh_options=tuple(options))
    return ShellSplit(inner.argv, ctx, inner.notes)


def quote_word(word: str) -> str:
    """Shell-quote one word; a word with a $VARIABLE keeps it expandable (double quotes)."""
    if word and re.fullmatch(r"[\w@%+=:,./-]+", word):
        return word
    if _VARIABLE.search(word):
        return '"' + re.sub(r'(["\\`])', r"\\\1", word) + '"'
    return shlex.quote(word)


def render_shell(argv: Sequence[str], ctx: ShellContext) -> str:
    """The shell line for `argv` inside `ctx` (inverse of split_shell_line)."""
    exported = _exported_by_prefix(ctx.prefix_commands)
    parts = [f"{k}={quote_word(str(v))}" for k, v in ctx.env.items() if exported.get(k) != str(v)]
    if ctx.nohup:
        parts.append("nohup")
    parts.extend(quote_word(w) for w in ctx.wrappers)
    if ctx.container is not None:
        argv = ctx.container.words(argv)
    parts.extend(quote_word(w) for w in argv)
    parts.extend(_render_redirections(ctx))
    line = " ".join(parts)
    if ctx.background:
        line += " &"
    if ctx.tail and not ctx.background and not ctx.tail[0].startswith(("&&", "||", "|")):
        line += ";"
    text = " ".join([*ctx.prefix_commands, line, *ctx.tail])
    if ctx.shell_wrapper:
        text = " ".join([*(quote_word(w) for w in ctx.shell_wrapper), shlex.quote(text)])
    if ctx.ssh_host:
        return " ".join(["ssh", *(quote_word(o) for o in ctx.ssh_options), ctx.ssh_host, shlex.quote(text)])
    return text


def _render_redirections(ctx: ShellContext) -> list[str]:
    out: list[str] = []
    if ctx.tail and ctx.tail[0].startswith("| tee"):
        return ["2>&1"] if ctx.stderr_file == ctx.stdout_file and ctx.stdout_file else []
    if ctx.stdout_file:
        out += [">>" if ctx.append else ">", quote_word(ctx.stdout_file)]
    if ctx.stderr_file:
        if ctx.stderr_file in (ctx.stdout_file, "&1"):
            out.append("2>&1")
        else:
            out += ["2>", quote_word(ctx.stderr_file)]
    return out


def _exported_by_prefix(prefix: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for cmd in prefix:
        for stmt in statements(cmd):
            words = [t.text for t in stmt.tokens if t.kind == "word"]
            if words and words[0] == "export":
                for w in words[1:]:
                    if _ASSIGNMENT.match(w):
                        k, v = w.split("=", 1)
                        out[k] = v
    return out

