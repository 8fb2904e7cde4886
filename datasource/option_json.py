"""JSON-valued options (``assign``, ``startingOffsets``, ``endingOffsets``,
``startingOffsetsByTimestamp``, ``endingOffsetsByTimestamp``): one parser for all of them, and the
error naming the option.

Every layout these options take is two levels deep (an object of objects or of lists). A value
nested deeper than :data:`MAX_DEPTH` levels is refused before it reaches :func:`json.loads`,
whose recursive decoder would otherwise raise ``RecursionError`` on ``"[" * 100000``. Messages
quote at most :data:`MAX_QUOTED` characters of the value, so an error stays one readable line
whatever its size.

Thread safety: pure functions.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

from datasource.errors import InvalidOptionError

MAX_DEPTH = 32
MAX_QUOTED = 100

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting_depth(text: str) -> int:
    """The deepest bracket nesting of ``text`` outside JSON strings (0 for a scalar)."""
    brackets = _BRACKETS.findall(_STRING.sub("", text))
    return max(accumulate(_STEP[b] for b in brackets), default=0)


def load_option_json(option: str, value: str, expected: str) -> object:
    """``value`` decoded; :class:`InvalidOptionError` naming ``option`` when it is not JSON or
    nests deeper than :data:`MAX_DEPTH` (``expected`` says what the option takes)."""
    if nesting_depth(value) > MAX_DEPTH:
        raise bad_option(
            option, value, f"expected {expected}; JSON nested deeper than {MAX_DEPTH} levels"
        )
    try:
        return json.loads(value)
    except ValueError as e:
        raise bad_option(option, value, f"expected {expected}; not valid JSON ({e})") from None


def quoted(value: str) -> str:
    """``repr(value)``, cut to :data:`MAX_QUOTED` characters with the full length said."""
    if len(value) <= MAX_QUOTED:
        return repr(value)
    return f"{value[:MAX_QUOTED]!r}... ({len(value)} characters)"


def bad_option(option: str, value: str, reason: str) -> InvalidOptionError:
    return InvalidOptionError(f"option {option}={quoted(value)} is invalid: {reason}")
