"""benchmarks/serve_numba_free.py on tiny batches: its plain-Python header walks give the compiled
walks' tables, summaries and seek results (the script compares them before timing), and it prints
every row."""

from __future__ import annotations

import numpy as np

from benchmarks import serve_numba_free as bench
from broker_embedded.record import log_validator as lv


def test_tiny_run_prints_every_row(capsys):
    assert bench.main(["--repeat", "1", "--calls", "5", "--records-per-batch", "3,20"]) == 0
    rows = [line.split(" | ")[0] for line in capsys.readouterr().out.splitlines()]
    assert [r for r in rows if r.startswith("| ")] == [
        "| request",
        "| produce, 1 batch of 3 records (388 B)",
        "| produce, 1 batch of 20 records (2,241 B)",
        "| produce, 64 batches of 3 records (24,832 B)",
        "| fetch, seek across 1,048,376 B to its last batch",
        "| process",
        "| numpy, crc32c, socket, ssl (a numba-free request path's needs)",
        "| + broker_server (imports numba), request kernels loaded",
    ]


def test_python_walk_refuses_what_the_compiled_walk_refuses():
    """A batch whose record count is not its last offset delta + 1: both say not ok."""
    buf = bytearray(bench.batches(2, 3))
    buf[len(buf) // 2 + 57 : len(buf) // 2 + 61] = (7).to_bytes(4, "big")  # 2nd batch's count
    _, compiled = lv.scan(np.frombuffer(buf, np.uint8), len(buf), lv.LEADER, 0, 1 << 20, True)
    _, python = bench.py_scan(buf, len(buf), 0, 1 << 20, True)
    assert compiled[lv.S_OK] == python[lv.S_OK] == 0
