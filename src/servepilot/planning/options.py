"""Reading engine options (EngineLaunch.options) as numbers, whatever form the parser left them in."""

from __future__ import annotations

import math
import re

from servepilot.engines.command import EngineLaunch
from servepilot.engines.flagtable import shown
from servepilot.errors import BadInput

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtKMGT]?)(i?)[bB]?\s*$")


def option(launch: EngineLaunch, *names: str):
    """The first of `names` the launch carries (engines spell some options several ways)."""
    for n in names:
        v = launch.options.get(n)
        if v is not None:
            return v
    return None


def as_int(value, what: str) -> int | None:
    """A whole number; vLLM also takes '32k' (x 1000) and '32K' (x 1024) for lengths (human_readable_int)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return int(value)
    try:
        return int(float(value))
    except OverflowError:  # inf, or more digits than a float holds: no engine takes it
        raise BadInput(f"{what} = {shown(value)} is not a usable whole number") from None
    except (TypeError, ValueError):
        pass
    m = _SIZE.match(str(value)[:100])
    if m and m.group(2) and not m.group(3):
        return parse_bytes(value, what)
    raise BadInput(f"{what} = {shown(value)} is not a whole number")


def as_float(value, what: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise BadInput(f"{what} = {shown(value)} is not a number") from None
    if not math.isfinite(number):
        raise BadInput(f"{what} = {shown(value)} is not a finite number")
    return number


def as_bool(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def parse_bytes(value, what: str) -> int | None:
    """vLLM's human_readable_int: '30G' = 30 × 2^30 (upper case binary), '30g' = 30 × 10^9."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise BadInput(f"{what} = {shown(value)} is not a finite size")
        return int(value)
    m = _SIZE.match(str(value)[:100])
    if not m:
        raise BadInput(f"{what} = {shown(value)} is not a size (e.g. 32G, 32000000000)")
    number, unit, binary = float(m.group(1)), m.group(2), m.group(3)
    if not unit:
        return int(number)
    power = "kmgt".index(unit.lower()) + 1
    base = 1024 if (unit.isupper() or binary) else 1000
    return int(number * base**power)
