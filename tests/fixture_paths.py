"""Where ../shared/fixtures is: beside the checkout (CI's layout), else the work tree's."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures")
