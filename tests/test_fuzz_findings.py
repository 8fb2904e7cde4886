"""Inputs the long fuzz campaign (benchmarks/fuzz.py) found, replayed as regression tests.

``lying_*``: a bit flip in a batch's lastOffsetDelta (covered by the CRC) in a segment that is not
the last made the batch claim offsets up to the high watermark, so that the read bounded by it
came back empty and every reader ended there without an error (55 of 105 records read).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fuzz import replay

FINDINGS = Path(__file__).parent / "fuzz_findings"


@pytest.mark.parametrize("name", sorted(p.name for p in FINDINGS.glob("lying_*.json")))
def test_lying_last_offset_delta_fails_reads(name: str) -> None:
    assert replay(FINDINGS / name) == 0
