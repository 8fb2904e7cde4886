"""A record to produce (Kafka's ``ProducerRecord`` without topic and partition) and building one
record batch v2 from such records, as a producer client does.

``value`` and ``key`` are bytes (``str`` is encoded as UTF-8; ``None`` is null: a null value is a
tombstone); ``headers`` are (UTF-8 key, bytes or None value) pairs; ``timestamp`` in ms since the
epoch, ``None`` for the producer's current time. Immutable: thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder

NO_PRODUCER_ID = -1


def _bytes(v: bytes | str | None, what: str) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    raise TypeError(f"record {what} must be bytes, str or None, not {type(v).__name__}")


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None

    @classmethod
    def of(cls, item: ProducerRecord | bytes | str | None) -> ProducerRecord:
        """A record from a record, or from a bare value."""
        if isinstance(item, ProducerRecord):
            return item
        return cls(_bytes(item, "value"))


def build_batch(
    records: Iterable[ProducerRecord | bytes | str],
    *,
    now_ms: int,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """One v2 batch holding ``records`` (offsets from 0; the leader assigns the real ones).
    ``ValueError`` when there are none."""
    builder = MemoryRecordsBuilder(
        0,
        compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
    )
    for item in records:
        r = ProducerRecord.of(item)
        headers = tuple((k, _bytes(v, "header value")) for k, v in r.headers)
        builder.append(
            None,
            now_ms if r.timestamp is None else r.timestamp,
            _bytes(r.key, "key"),
            _bytes(r.value, "value"),
            headers,
        )
    if builder.num_records == 0:
        raise ValueError("no records to produce")
    return builder.build()
