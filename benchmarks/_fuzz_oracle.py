"""The fuzz oracle: what a reader may do with a mutated input, and how a run is bounded.

Allowed outcomes: the correct records, or a domain error (a subclass of
``broker_embedded.errors.KafkaLogError``, which the data source's errors also subclass) whose
message names the file. Everything else is a :class:`Finding`:

- ``crash``: any other exception (IndexError, struct.error, ValueError, RecursionError,
  MemoryError, ...), with its traceback;
- ``hang``: one input took longer than its time bound (:func:`bounded`, SIGALRM; the campaign's
  watchdog thread catches what an alarm cannot interrupt);
- ``disagreement``: the columnar and the Python decoders read the same bytes differently (one
  fails and not the other, or different rows). One difference is allowed: a record whose
  timestamp in microseconds overflows int64 fails the columnar decoder (Spark's timestamp type
  cannot hold it: ``decode_kernel.MAX_TIMESTAMP_MS``) while the Python decoder, which is not
  Spark's, returns it;
- ``loss``: records missing or changed without an error where the mutation cannot have removed
  them legitimately (see ``_fuzz_mutators``: a mutation that is neither ``recrc`` nor ``lossy``);
- ``unnamed``: a domain error that does not name the file it is about;
- ``memory``: the process's peak RSS rose past the campaign's bound.

The decoders are called through their public entry points only: ``columnar_decoder.decode`` and
``records.iter_batches`` (``ensure_valid`` then ``records`` of each batch). Rows are compared as
(offset, key, value, headers) tuples. Stateless; :func:`bounded` uses the process's SIGALRM so it
must run on the main thread.
"""

from __future__ import annotations

import contextlib
import re
import signal
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from benchmarks._fuzz_corpus import Row, Seed
from benchmarks._fuzz_mutators import Mutant, unprotected
from broker_embedded.errors import KafkaLogError
from broker_embedded.record.columnar_decoder import decode
from broker_embedded.record.decode_kernel import MAX_TIMESTAMP_MS
from broker_embedded.record.record_batch import Record
from broker_embedded.record.records import iter_batches

_SPARK_RANGE = re.compile(r"timestamp (-?\d+) ms is out of Spark's range")


class Finding(Exception):
    """A defect found: ``kind`` (see the module docstring) and what happened."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class Hang(BaseException):
    """Raised by the alarm of :func:`bounded` (a BaseException: code under test that catches
    ``Exception`` cannot swallow it)."""


def _alarm(signum: int, frame: object) -> None:
    raise Hang("time bound exceeded")


@contextlib.contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Raise :class:`Finding` ("hang") when the body runs longer than ``seconds``."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except Hang:
        raise Finding("hang", f"no result after {seconds:g} s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def crash(e: BaseException, what: str) -> Finding:
    """A crash finding: the exception and a short traceback (the last frames of this project
    and the innermost frame; a RecursionError's thousand frames are not kept)."""
    frames = traceback.extract_tb(e.__traceback__)
    own = [f for f in frames if "/lib/python" not in f.filename][-6:]
    kept = own + [f for f in frames[-1:] if f not in own]
    tb = "\n".join(f'  File "{f.filename}", line {f.lineno}, in {f.name}' for f in kept)
    return Finding("crash", f"{what}: {type(e).__name__}: {str(e)[:500]}\n{tb}")


def domain_or_crash(e: BaseException, what: str, source: str | tuple[str, ...] = ()) -> None:
    """Accept ``e`` if it is a domain error naming ``source`` (one of them), else raise."""
    if isinstance(e, Finding):
        raise e
    if not isinstance(e, KafkaLogError):
        raise crash(e, what) from e
    names = (source,) if isinstance(source, str) else source
    if names and not any(n in str(e) for n in names):
        raise Finding("unnamed", f"{what}: {type(e).__name__} names none of {names}: {e}")


def rows_python(data: bytes, source: str) -> list[Row]:
    """The Python decoder: every batch validated, then its records (control batches: their
    header and CRC only, as a read_uncommitted consumer reads them).

    As the columnar decoder reads offsets from 0 (its smallest start offset), batches whose
    last offset is negative are walked over, and records below 0 dropped."""
    return [(r.offset, r.key, r.value, tuple(r.headers)) for r in _python_records(data, source)]


def _python_records(data: bytes, source: str) -> Iterator[Record]:
    for batch in iter_batches(data, source, tail="error"):
        if batch.last_offset < 0:
            continue
        batch.ensure_valid()
        if not getattr(batch, "is_control", False):  # a consumer reads no control record
            yield from (r for r in batch.records() if r.offset >= 0)


def rows_arrow(batches: tuple[pa.RecordBatch, ...] | list[pa.RecordBatch]) -> list[Row]:
    rows: list[Row] = []
    for b in batches:
        cols = [b.column(n).to_pylist() for n in ("offset", "key", "value", "headers")]
        for offset, key, value, headers in zip(*cols, strict=True):
            hs = tuple((h["key"], h["value"]) for h in headers or ())
            rows.append((offset, key, value, hs))
    return rows


def rows_columnar(data: bytes, source: str) -> list[Row]:
    """The columnar decoder, called again from where it stopped while its inflation budget ends
    a call early (a batch it could not inflate within what was left is decoded, or reported
    corrupt, by the next call), as its callers do."""
    rows: list[Row] = []
    pos = 0
    while True:
        found = decode(
            memoryview(data)[pos:],
            topic="fz",
            partition=0,
            include_headers=True,
            source=source,
            base_position=pos,
            tail="error",
        )
        rows += rows_arrow(found.batches)
        if not found.stopped_early:
            return rows
        assert found.end_position > 0, "a call stopped early without progress"
        pos += found.end_position


def _outcome(fn, data: bytes, source: str) -> tuple[list[Row] | None, BaseException | None]:
    try:
        return fn(data, source), None
    except Finding:
        raise
    except Hang:
        raise
    except BaseException as e:  # judged by the caller
        return None, e


def check_decoders(data: bytes, source: str) -> list[Row] | None:
    """Both decoders on ``data``: the rows they agree on, ``None`` when both fail with domain
    errors naming ``source``; else a :class:`Finding`."""
    py_rows, py_err = _outcome(rows_python, data, source)
    col_rows, col_err = _outcome(rows_columnar, data, source)
    for err, who in ((py_err, "python decoder"), (col_err, "columnar decoder")):
        if err is not None:
            domain_or_crash(err, who, source)
    if py_err is not None and col_err is None and (getattr(py_err, "base_offset", 0) or 0) < 0:
        return col_rows  # an entry below offset 0: the columnar decoder walks over it unread
    if py_err is None and _beyond_spark(col_err, data, source):
        return None  # the allowed difference (see the module docstring)
    if (py_err is None) != (col_err is None):
        ok, bad = ("python", col_err) if py_err is None else ("columnar", py_err)
        raise Finding("disagreement", f"only the {ok} decoder reads it; the other: {bad!r}")
    if py_rows != col_rows:
        assert py_rows is not None and col_rows is not None
        raise Finding(
            "disagreement",
            f"rows differ: python {len(py_rows)} rows, columnar "
            f"{len(col_rows)}; first difference {_first_diff(py_rows, col_rows)}",
        )
    return py_rows


def _beyond_spark(col_err: BaseException | None, data: bytes, source: str) -> bool:
    """The columnar decoder refused a timestamp beyond Spark's range that the Python decoder
    returns for a record of ``data``."""
    found = _SPARK_RANGE.search(str(col_err)) if col_err is not None else None
    if found is None or abs(int(found.group(1))) <= MAX_TIMESTAMP_MS:
        return False
    return any(r.timestamp == int(found.group(1)) for r in _python_records(data, source))


def _first_diff(a: list[Row], b: list[Row]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"at row {i}: {x!r} vs {y!r}"
    return f"at row {min(len(a), len(b))} (one is longer)"


def check_no_loss(seed: Seed, mutant: Mutant, rows: list[Row], *, prefix_ok: bool) -> None:
    """Rows read without error from a mutant: the original rows unless the mutation may have
    legitimately changed them; ``prefix_ok``: a torn tail may cut the end (last segment)."""
    expected = list(seed.rows)
    if mutant.recrc or mutant.lossy or unprotected(seed, mutant.touched):
        return  # a moved base offset may fall outside the range read: see check_values_stable
    got, want = rows, expected
    if got == want or (prefix_ok and want[: len(got)] == got):
        return
    raise Finding(
        "loss",
        f"{mutant.kind} at bytes {mutant.touched} of {seed.name}: read "
        f"{len(got)} rows without error, expected {len(want)}; first difference "
        f"{_first_diff(got, want)}",
    )


def check_values_stable(expected: dict[int, tuple], rows: list[Row], what: str) -> None:
    """No offset may read as a different record than the original log holds at it."""
    for row in rows:
        want = expected.get(row[0])
        if want is None or want != row[1:]:
            raise Finding(
                "loss", f"{what}: offset {row[0]} reads {row[1:]!r}, the log holds {want!r}"
            )


@dataclass(frozen=True)
class Tally:
    """Inputs tried and seconds spent by one target."""

    inputs: int = 0
    seconds: float = 0.0
