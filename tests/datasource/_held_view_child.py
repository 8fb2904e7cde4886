"""Hold a log dir's in-place fetch while another process truncates its segment, in a process of
its own (a SIGBUS kills this process, not pytest), for tests/datasource/test_held_view.py.

    python -m tests.datasource._held_view_child LOG_DIR TOPIC PARTITION OFFSET [--no-decode]

Fetches ``OFFSET`` in place (1 MiB), keeps the bytes it read, truncates the segment's ``.log`` at
the start of the page holding the fetched batches' first byte (a read of a mapped page wholly
past the end of its file is a SIGBUS; what recovery does to a torn tail above the recovery point,
and a replica's truncation after an unclean election), then decodes the fetched records with
the columnar decoder (the executor's next step; not with ``--no-decode``) and fetches the same
offset again, in place and copied. Prints one JSON line: whether the records were a view of the
mapping, the decoded offsets' first, last and count and whether the bytes are still those read
(null with ``--no-decode``), and the type and message of each fetch's error after the
truncation ("" when none).
"""

from __future__ import annotations

import json
import mmap
import os
import sys

from broker_embedded.record.columnar_decoder import decode
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.topic_partition import TopicPartition

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
MIB = 1 << 20


def main() -> None:
    log_dir, tp = sys.argv[1], TopicPartition(sys.argv[2], int(sys.argv[3]))
    offset = int(sys.argv[4])
    with LogDirSource(log_dir).open() as source:
        fetched = source.fetch_in_place(tp, offset, MIB, UNCOMMITTED)
        read = bytes(fetched.records)
        view = source.view(tp)
        base = max(b for b in view.base_offsets if b <= offset)
        segment = view.segment(base)
        position = segment.translate_offset(offset).position
        os.truncate(segment.log_path, position - position % mmap.PAGESIZE)
        touch = "--no-decode" not in sys.argv
        report = {
            "view": isinstance(fetched.records, memoryview),
            "decoded": _decoded(fetched.records, tp, offset) if touch else None,
            "unchanged": bytes(fetched.records) == read if touch else None,
            "again in place": _error(lambda: source.fetch_in_place(tp, offset, MIB, UNCOMMITTED)),
            "again copied": _error(lambda: source.fetch(tp, offset, MIB, UNCOMMITTED)),
        }
    print(json.dumps(report), flush=True)


def _decoded(records, tp: TopicPartition, offset: int) -> list[int]:
    decoded = decode(
        records,
        topic=tp.topic,
        partition=tp.partition,
        start_offset=offset,
        end_offset=1 << 62,
        include_headers=False,
        source="held view",
    )
    offsets = [o for b in decoded.batches for o in b.column("offset").to_pylist()]
    return [offsets[0], offsets[-1], len(offsets)]


def _error(fetch) -> list[str]:
    try:
        fetch()
    except Exception as e:  # the error named, for the test to compare
        return [type(e).__name__, str(e)]
    return ["", ""]


if __name__ == "__main__":
    main()
