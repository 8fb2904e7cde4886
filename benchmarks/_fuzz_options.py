"""Options fuzzing: random option maps for the ``kafkalog`` source, hostile values included.

A map takes a few option names (Spark's spelling in random case, sometimes an unknown name or a
``kafka.*`` consumer setting) with values drawn from: well-formed values of each option's kind,
numbers at and past the int32/int64 limits, unit suffixes, blanks, NUL and non-ASCII digits,
JSON of the wrong shape (lists for maps, strings for offsets, floats, NaN, duplicate keys) and
deeply nested JSON (``"[" * 100000``, the RecursionError of issue 11 part 2 item 4), regular
expressions that do not compile or nest deeply.

The oracle: ``KafkaSourceOptions.parse(options, streaming=...)`` returns, or raises an
:class:`InvalidOptionError` whose message names one of the options (by the name given or
Spark's spelling); any other exception is a crash. Stateless; thread-safe.
"""

from __future__ import annotations

import json
import random

from benchmarks._fuzz_oracle import Finding, crash
from datasource.errors import InvalidOptionError
from datasource.kafka_source_options import OPTION_NAMES, KafkaSourceOptions

NAMES = tuple(OPTION_NAMES.values())
EXTRA_NAMES = ("kafka.bootstrap.servers", "kafka.group.id", "pathx", "", " path ", "assign\x00")
NUMBERS = (
    "0",
    "1",
    "-1",
    "2147483647",
    "2147483648",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "1e3",
    "1.5",
    "0x10",
    "\u0663",
    "10 kb",
    "1tib",
    "99999999999999999999999999999 gb",
    "nan",
    "inf",
    "",
    " ",
    "+3",
    "15 min",
    "-5s",
    "1h",
    "true",
    "false",
    "TRUE",
    "yes",
)
DEEP = (1, 10, 1000, 100_000)


def _deep(rng: random.Random) -> str:
    n = rng.choice(DEEP)
    opener, closer = rng.choice((("[", "]"), ('{"t":', "}"), ('{"t":{"0":', "}}")))
    return opener * n + ("0" if rng.random() < 0.5 else "") + closer * rng.choice((0, n))


def _json_value(rng: random.Random) -> str:
    topic = rng.choice(("t", "fz", "", "a" * 300, "\u00e9", "t t", "t-0", "__x"))
    part = rng.choice(("0", "1", "-1", "2147483648", "1.0", '"0"', "null", "[]"))
    offset = rng.choice(
        (
            "-2",
            "-1",
            "0",
            "5",
            "9223372036854775807",
            "9223372036854775808",
            "-3",
            "1e2",
            "NaN",
            "Infinity",
            '"latest"',
            "null",
            "{}",
        )
    )
    shapes = (
        f'{{"{topic}":{{"{part.strip(chr(34))}":{offset}}}}}',
        f'{{"{topic}":[{part}]}}',
        f'[{{"{topic}":{offset}}}]',
        f'{{"{topic}":{{"0":{offset}, "0":{offset}}}}}',
        f'{{"{topic}":{offset}}}',
        '"earliest"',
        "earliest",
        "latest",
        "LATEST",
        "{",
        "}",
        "[1,2",
        "null",
        "[]",
        "{}",
    )
    return rng.choice(shapes)


def _regex(rng: random.Random) -> str:
    return rng.choice(
        (
            "fz.*",
            "(",
            "[",
            "a{99999999999}",
            "(" * 500 + ")" * 500,
            "*",
            "\\",
            "(?P<x>",
            "(a|a)*" * 10,
            "t",
        )
    )


def value_for(name: str, rng: random.Random) -> str:
    lower = name.lower()
    r = rng.random()
    if r < 0.08:
        return _deep(rng)
    if r < 0.15:
        return rng.choice(NUMBERS)
    if "offsets" in lower or lower == "assign":
        return _json_value(rng)
    if lower == "subscribepattern":
        return _regex(rng)
    if lower in ("subscribe", "path"):
        return rng.choice(("fz", "fz,old", ",", "", " , ", "/tmp/x", "a" * 1000, "\x00"))
    return rng.choice(NUMBERS + ("read_committed", "READ_UNCOMMITTED", "error", "latest", "x"))


def random_options(rng: random.Random) -> dict[str, str]:
    options: dict[str, str] = {}
    if rng.random() < 0.9:
        options["path"] = "/tmp/kafkalog-fuzz-no-such-dir"
    if rng.random() < 0.8:
        options[rng.choice(("subscribe", "assign", "subscribePattern"))] = "fz"
    for _ in range(rng.randrange(0, 5)):
        name = rng.choice(NAMES) if rng.random() < 0.9 else rng.choice(EXTRA_NAMES)
        if rng.random() < 0.3:
            name = "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in name)
        options[name] = value_for(name, rng)
    return options


def check_options(options: dict[str, str], streaming: bool | None) -> str:
    """Parse; "ok" or "error" (an InvalidOptionError naming an option); else a Finding."""
    try:
        KafkaSourceOptions.parse(options, streaming=streaming)
    except InvalidOptionError as e:
        text = str(e).lower()
        names = [k.strip().lower() for k in options] + [n.lower() for n in NAMES]
        if not any(n and n in text for n in names):
            raise Finding("unnamed", f"option error names no option: {e}") from None
        return "error"
    except Exception as e:
        raise crash(e, f"KafkaSourceOptions.parse({_show(options)}, streaming={streaming})") from e
    return "ok"


def _show(options: dict[str, str]) -> str:
    return json.dumps(
        {k: (v if len(v) < 80 else v[:40] + f"...({len(v)} chars)") for k, v in options.items()}
    )


def fuzz_one(rng: random.Random) -> tuple[dict[str, str], bool | None, str]:
    options = random_options(rng)
    streaming = rng.choice((False, True, None))
    return options, streaming, check_options(options, streaming)
