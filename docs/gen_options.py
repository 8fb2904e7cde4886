"""Write docs/user-guide/options.md, the option reference, from the one option table in the code
(datasource/option_table.py). Run from anywhere: ``python docs/gen_options.py``.
``mkdocs build`` (docs/hooks.py) and tests/test_docs.py fail while the page differs from it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "user-guide" / "options.md"


def generated() -> str:
    """The page's text, as the table gives it now."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from datasource.option_table import markdown

    return markdown()


if __name__ == "__main__":
    PAGE.write_text(generated())
    print(f"wrote {PAGE.relative_to(ROOT)}")
