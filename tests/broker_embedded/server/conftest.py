"""The wire-protocol server needs kio, which ships for Python 3.11+ only (pyproject.toml)."""

import pytest

pytest.importorskip("kio", reason="kio (the server's protocol schemas) needs Python 3.11+")
