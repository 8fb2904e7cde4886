"""Inputs the long fuzz campaign (benchmarks/fuzz.py) found and that are not fixed yet, replayed.

Each is a strict xfail: the test fails the day the defect is fixed, so that its mark goes and it
stays as a regression test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fuzz import replay

FINDINGS = Path(__file__).parent / "fuzz_findings"


@pytest.mark.xfail(
    strict=True,
    reason="issue 11 follow-up: a bit flip in a batch's lastOffsetDelta (CRC-covered) of a "
    "segment that is not the last makes position_of(high watermark) stop the read before that "
    "batch, so its CRC is never checked and the fetch comes back empty below the high "
    "watermark: readers end there without an error",
)
@pytest.mark.parametrize("name", sorted(p.name for p in FINDINGS.glob("lying_*.json")))
def test_lying_last_offset_delta_fails_reads(name: str) -> None:
    assert replay(FINDINGS / name) == 0
