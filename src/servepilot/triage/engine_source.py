"""The engines' own refusal messages, read from their sources: a tier below the signatures.

signatures.yaml knows the messages someone here has seen in a log and explained. The engines
raise many more refusals than that ("... is not supported on ...", "Pipeline parallelism is
not supported for this model ..."), and a refusal nobody here has met yet is still the
engine's own words about what it would not do. engine_messages.json lists those words: message
templates harvested from the raise and error-log calls of chosen modules of each engine's
sdist (tools/harvest_engine_messages.py), each with the category of the module it lives in,
the file@version it was read from and the PEP 440 range of releases it was seen in.

diagnosis.py asks this module only about an error no signature knows; a match decides that
error's category (basis "engine-source": surer than a guess from frames or words, less sure
than a signature, which also carries an explanation and remedies). The data is loaded on the
first such question, never at import: most triage runs meet no unknown error.

A template is the message with each interpolated value written `{}` (and a literal brace
doubled, as in str.format). Its regex is the literal parts, escaped, joined by lazy wildcards
(atomic, so a hostile line cannot make it backtrack); runs of spaces match any whitespace (a
reporter's paste rewraps lines).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

DATA_FILE = "engine_messages.json"
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{\}")
_SPACES = re.compile(r"\s+")
# what counts as a literal word when judging whether a template is evidence at all
_WORD = re.compile(r"[A-Za-z][A-Za-z_']+")


def template_parts(template: str) -> list[str]:
    """The literal pieces of a template, in order (an empty piece where a value stood)."""
    parts, current, pos = [], [], 0
    for m in _PLACEHOLDER.finditer(template):
        current.append(template[pos : m.start()])
        if m.group(0) == "{}":
            parts.append("".join(current))
            current = []
        else:
            current.append(m.group(0)[0])  # "{{" -> "{", "}}" -> "}"
        pos = m.end()
    current.append(template[pos:])
    parts.append("".join(current))
    return parts


def template_regex(template: str) -> str:
    """The regex a template's messages match: literal pieces joined by lazy wildcards.

    Leading and trailing values are dropped (the regex is searched, not anchored), and so are
    the outer spaces of each piece, so a value printed with or without padding still matches.
    """
    pieces = [p.strip() for p in template_parts(template)]
    pieces = [p for p in pieces if p]
    escaped = [r"\s+".join(re.escape(word) for word in _SPACES.split(p)) for p in pieces]
    if not escaped:
        return ""
    # Each wildcard and the piece after it form an atomic group: the first place the piece
    # appears is taken and never revisited. Plain lazy wildcards would try every combination
    # of places when the last piece is missing (seconds per line on a hostile log); taking the
    # first place each time finds the pieces in order whenever they are there at all.
    return escaped[0] + "".join(f"(?>.*?{piece})" for piece in escaped[1:])


def literal_words(template: str) -> list[str]:
    """The words a template says in its own text (values excluded)."""
    return _WORD.findall(" ".join(template_parts(template)))


# Words that say nothing about what failed ("module {} has no attribute {}" is Python's own
# AttributeError retold: it would match any such error).
_STOP_WORDS = frozenset(
    "the and for not has have had are was were but with this that these those from into its "
    "you your "
    "can cannot could should would will may might got get set use used using than then there here "
    "which when what where who all any one two only also been being does did done".split()
)
MIN_WORDS = 4  # content words a template needs to be evidence (3 will do when they are long)
MIN_LETTERS_OF_THREE = 22


def content_words(template: str) -> list[str]:
    """The literal words of three letters or more that are not function words."""
    return [w for w in literal_words(template) if len(w) >= 3 and w.lower() not in _STOP_WORDS]


def is_evidence(template: str) -> bool:
    """Whether a template says enough in its own words to name a failure."""
    words = content_words(template)
    if len(words) >= MIN_WORDS:
        return True
    return len(words) == 3 and sum(len(w) for w in words) >= MIN_LETTERS_OF_THREE


_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def template_head(template: str) -> str | None:
    """The template's first sentence, when more follows and that sentence is evidence alone.

    Reporters paste the line an engine printed, often cut short ("Model architectures
    ['X'] are not supported for now." without the list of supported ones that follows): the
    first sentence of an engine's message says what it refused.
    """
    m = _SENTENCE_END.search(template)
    if m is None or not template[m.end() :].strip():
        return None
    head = template[: m.end()]
    return head if is_evidence(head) else None


@dataclass(frozen=True)
class EngineMessage:
    """One harvested template: what it says, what it means, where it was read."""

    engine: str
    category: str
    template: str
    source: str  # path@version in the engine's sdist (the newest release it was seen in)
    versions: str  # PEP 440 specifier: the releases harvested that hold it
    needle: str  # its longest literal piece, lowercased: a cheap test before the regex

    @property
    def pattern(self) -> re.Pattern[str]:
        """Compiled on first use: a few thousand regexes compiled up front cost seconds, and a
        message's needle rules out all but a handful."""
        return _compile(template_regex(self.template))

    def matches(self, message: str) -> bool:
        """The message was printed from this template: all of it, or its first sentence."""
        if self.pattern.search(message):
            return True
        head = template_head(self.template)
        return head is not None and _compile(template_regex(head)).search(message) is not None


@functools.lru_cache(maxsize=4096)
def _compile(regex: str) -> re.Pattern[str]:
    return re.compile(regex, re.IGNORECASE)


def _needle(template: str) -> str:
    """The longest literal piece of the template's first sentence (or of all of it): a message
    that holds the template, or only its first sentence, holds this."""
    head = template_head(template) or template
    return max((p.strip().lower() for p in template_parts(head)), key=len)


def parse_messages(data: dict) -> tuple[EngineMessage, ...]:
    """The entries of an engine_messages.json document, validated."""
    from servepilot.categories import check_category

    out = []
    for row in data["entries"]:
        check_category(row["category"])
        out.append(
            EngineMessage(
                engine=row["engine"],
                category=row["category"],
                template=row["template"],
                source=row["source"],
                versions=row["versions"],
                needle=_needle(row["template"]),
            )
        )
    return tuple(out)


@functools.cache
def load_messages() -> tuple[EngineMessage, ...]:
    """The packaged templates, parsed on first use."""
    from servepilot.datafile import resource_path

    text = resource_path("servepilot.triage", DATA_FILE).read_text(encoding="utf-8")
    return parse_messages(json.loads(text))


# Only this much of a message is searched: the templates' literal text sits at its start, and a
# 50 MB line must not be walked by thousands of wildcard regexes.
_MESSAGE_CHARS = 2000


def match_engine_message(
    message: str, engine: str | None = None, messages: tuple[EngineMessage, ...] | None = None
) -> EngineMessage | None:
    """The harvested template a message was printed from, or None.

    `engine` prefers that engine's templates (the same refusal can be worded alike in two
    engines' sources). Among matches the template with the most literal text wins: it says
    more of the message, so it is the likelier origin.
    """
    text = message[:_MESSAGE_CHARS]
    lowered = text.lower()
    found = [
        m
        for m in (messages if messages is not None else load_messages())
        if m.needle in lowered and m.matches(text)
    ]
    if not found:
        return None
    return max(found, key=lambda m: (m.engine == engine, len("".join(template_parts(m.template)))))
