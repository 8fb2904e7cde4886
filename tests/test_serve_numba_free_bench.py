"""benchmarks/serve_numba_free.py on tiny batches: the walk as written and compiled give the same
tables, summaries and seek results (the script compares them before timing), and it prints every
row, the memory probe's included (which fails if the request path imports numba)."""

from __future__ import annotations

from benchmarks import serve_numba_free as bench


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
        "| broker_server and the request path (no numba)",
        "| + the compiled walk loaded (numba: the cleaner, a Spark read)",
    ]
