"""A Fetch read (``LocalLog.fetch``) leaves none of the segment's mapping resident in the process:
its header walks and copy touch the pages, and it releases them once the bytes are a copy or a
region, so a server's memory does not grow with the segments its consumers read
(``/proc/self/smaps``: the mapping of the ``.log`` has no resident page afterwards)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.topic_partition import TopicPartition

RECORDS = 4096
VALUE = b"v" * 1000


def resident_kib(path: Path) -> list[int]:
    """The ``Rss`` of each mapping of ``path`` in this process, in KiB."""
    found, inside = [], False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                inside = len(head) > 5 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                found.append(int(head[1]))
    return found


@pytest.mark.parametrize("zero_copy", [False, True])
@pytest.mark.parametrize("isolation", [FetchIsolation.HIGH_WATERMARK, FetchIsolation.TXN_COMMITTED])
def test_fetching_a_segment_through_leaves_none_of_it_resident(
    tmp_path: Path, zero_copy: bool, isolation: FetchIsolation
) -> None:
    broker = Broker(tmp_path / "logs", create=True)
    try:
        broker.create_topic("t", 1)
        for _ in range(RECORDS // 256):
            broker.produce("t", 0, [ProducerRecord(VALUE)] * 256, acks=1)
        log = broker.log_manager.logs[TopicPartition("t", 0)]
        segment = tmp_path / "logs" / "t-0" / "00000000000000000000.log"
        batch = segment.stat().st_size // (RECORDS // 256)  # one batch per produce, same size
        offset, fetched = 0, 0
        while offset < RECORDS:
            info = log.read(offset, 1 << 20, isolation, zero_copy=zero_copy)
            size = info.region.length if zero_copy else len(info.records)
            assert size == 4 * batch  # the whole batches within 1 MiB
            offset, fetched = offset + 256 * (size // batch), fetched + size
        assert fetched == segment.stat().st_size
        assert resident_kib(segment) == [0]  # mapped, none of it resident
    finally:
        broker.close()
