"""Read offset ranges the way a Spark task does, in a process of its own, and report its peak
memory, for tests/datasource/test_read_memory.py.

    python -m tests.datasource._read_rss_child (--bootstrap HOST:PORT | --log-dir DIR) \
        TOPIC PARTITION END [END ...] [--fetch-bytes N]

Runs ``datasource.offset_range_reader.read_offset_range`` over ``[0, END)`` for each END in
turn (the executor read path: the wire fetch source with its pipelined fetch, or the log dir's)
and drops every Arrow batch once counted, as Spark's ``noop`` sink does. Prints one JSON line
per read: the rows, the first and last offset, the sum of the offsets, the length of the last
value, the peak resident set size of this process before and after the read (``VmHWM`` of
/proc/self/status, KiB: the peak of this read and the ones before it), its anonymous and
file-backed resident memory at the end (``RssAnon``, ``RssFile``) and the read's seconds.
"""

from __future__ import annotations

import argparse
import json
import time

import pyarrow.compute as pc

from broker_embedded.client.wire_fetch_source import WireSource
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from datasource.kafka_input_partition import KafkaInputPartition
from datasource.offset_range_reader import read_offset_range


def status_kib(field: str) -> int:
    """A memory field of /proc/self/status (``VmHWM``, ``RssAnon``, ``RssFile``), in KiB."""
    for line in open("/proc/self/status", encoding="ascii"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser()
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap")
    where.add_argument("--log-dir")
    parser.add_argument("topic")
    parser.add_argument("partition", type=int)
    parser.add_argument("end", type=int, nargs="+")
    parser.add_argument("--fetch-bytes", type=int, default=1 << 20)
    a = parser.parse_args()
    source = WireSource(a.bootstrap) if a.bootstrap else LogDirSource(a.log_dir)
    for end in a.end:
        task = KafkaInputPartition(source, a.topic, a.partition, 0, end, fetch_bytes=a.fetch_bytes)
        print(json.dumps(read(task)), flush=True)


def read(task: KafkaInputPartition) -> dict:
    """Read ``task``'s range, dropping each batch once counted; the report (module docstring)."""
    before = status_kib("VmHWM")
    rows = offset_sum = 0
    first = last = last_value_len = -1
    t0 = time.monotonic()
    for batch in read_offset_range(task):
        offsets = batch.column("offset")
        if first < 0:
            first = offsets[0].as_py()
        rows += batch.num_rows
        offset_sum += pc.sum(offsets).as_py()
        last = offsets[-1].as_py()
        last_value_len = len(batch.column("value")[-1].as_py())
    seconds = time.monotonic() - t0
    return {
        "rows": rows,
        "first": first,
        "last": last,
        "offset_sum": offset_sum,
        "last_value_len": last_value_len,
        "rss_before_kib": before,
        "peak_rss_kib": status_kib("VmHWM"),
        "rss_anon_kib": status_kib("RssAnon"),
        "rss_file_kib": status_kib("RssFile"),
        "seconds": round(seconds, 2),
    }


if __name__ == "__main__":
    main()
