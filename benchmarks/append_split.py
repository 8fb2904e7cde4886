"""Where an acks=1 produce request's time goes in the embedded broker, layer by layer.

    .venv/bin/python benchmarks/append_split.py [--records N]

Appends the batches of ``broker.py`` (N records of 100-byte values, default 500,000, in 16 KiB
batches) with ``Broker.append(acks=1)`` to one partition of a standalone broker, as
``broker.py``'s produce acks=1 does, with each layer of the path wrapped in a timer: the broker
facade, the replica manager, the partition, the log (its compiled scan and CRC check, and the
append after it), the segment writer and segment, the write itself, the indexes and the high
watermark. Prints each layer's inclusive wall time per request (a layer includes the layers it
calls; the wrapper's own cost, measured on an empty function, is subtracted once), beside the
request's total, and the same batches written to a plain file one ``write`` each, as
``broker.py``'s baseline. Timers add about 0.1 us a layer, so the total here is a little above
``broker.py``'s. Everything lives in a temporary directory deleted at the end.
"""

from __future__ import annotations

import argparse
import functools
import gc
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import broker as bench  # noqa: E402

from broker_embedded.broker import Broker  # noqa: E402
from broker_embedded.replica_manager import partition, replica_manager  # noqa: E402
from broker_embedded.storage import (  # noqa: E402
    active_segment,
    log_appender,
    segment_indexer,
    segment_writer,
    unified_log,
)

LAYERS: list[tuple[object, str, str]] = [
    (Broker, "append", "Broker.append (the request)"),
    (replica_manager.ReplicaManager, "_append_one", "ReplicaManager: one partition"),
    (partition.Partition, "append_records_to_leader", "Partition: as leader"),
    (unified_log.UnifiedLog, "append_as_leader", "UnifiedLog: copy, checks, append"),
    (log_appender.LogAppender, "_scan_as_leader", "  compiled scan, CRCs, offsets"),
    (log_appender.log_validator, "scan", "    log_validator.scan"),
    (log_appender, "_crcs_match", "    the CRC check"),
    (log_appender.LogAppender, "_append_batches", "  the append after the checks"),
    (segment_writer.SegmentWriter, "_maybe_roll", "    the roll check"),
    (active_segment.ActiveSegment, "append", "    LogSegment.append"),
    (active_segment, "_write_all", "      the write"),
    (segment_indexer.SegmentIndexer, "on_append", "      the indexes"),
    (partition.Partition, "_maybe_increment_hw", "  the high watermark"),
]


def _wrap(owner: object, name: str, totals: dict[str, int], label: str) -> Callable[[], None]:
    """Time ``owner.name`` into ``totals[label]``; returns the undo."""
    fn = getattr(owner, name)
    clock = time.perf_counter_ns

    @functools.wraps(fn)
    def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        began = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[label] += clock() - began

    setattr(owner, name, timed)
    return lambda: setattr(owner, name, fn)


def _wrapper_cost(calls: int) -> float:
    """Nanoseconds a timer counts for a call of an empty function."""
    totals = {"empty": 0}

    class Empty:
        @staticmethod
        def call() -> None:
            return None

    undo = _wrap(Empty, "call", totals, "empty")
    for _ in range(calls):
        Empty.call()
    undo()
    return totals["empty"] / calls


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    args = parser.parse_args(argv)
    work = bench.build_batches(args.records, 100, 16 * 1024)
    requests = len(work.batches)
    with tempfile.TemporaryDirectory(prefix="kafkalog-split-") as tmp:
        base = Path(tmp)
        write = bench._timed(lambda: bench.write_file(base / "plain.bin", work.batches))
        broker = Broker(base / "broker", create=True)
        try:
            broker.create_topic(bench.TOPIC, 1)
            warm = bench.Workload(work.batches[:100], 0)
            bench.produce_standalone(broker, warm, 1)  # compiled kernels loaded, files open
            totals = {label: 0 for _, _, label in LAYERS}
            undo = [_wrap(owner, name, totals, label) for owner, name, label in LAYERS]
            gc.collect()
            t = bench._timed(lambda: bench.produce_standalone(broker, work, 1))
            for u in reversed(undo):
                u()
        finally:
            broker.close()
            shutil.rmtree(base / "broker")
    cost = _wrapper_cost(requests) / 1000
    print(f"{requests:,} requests of {work.bytes / requests / 1024:.1f} KiB, acks=1, one partition")
    print(f"request: {t.wall / requests * 1e6:.1f} us wall, {t.cpu / requests * 1e6:.1f} us CPU")
    print(f"the same bytes written to a plain file: {write.wall / requests * 1e6:.1f} us a write")
    print()
    print("| layer (inclusive) | us a request |")
    print("|---|---|")
    for _, _, label in LAYERS:
        print(f"| {label} | {totals[label] / requests / 1000 - cost:.2f} |")


if __name__ == "__main__":
    main()
