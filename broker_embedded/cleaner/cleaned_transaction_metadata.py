"""The transactions seen by one pass of the cleaner over a log (Kafka's
``CleanedTransactionMetadata``; the map pass and the recopy pass each have one): the aborted
transactions of the log's ``.txnindex`` files, consumed in first-offset order up to each
batch's last offset, tell which transactional batches go; an ABORT marker may go unless this
pass saw batches of its transaction (then its entry goes to the cleaned segment's
``.txnindex``, :attr:`CleanedTransactionMetadata.cleaned_index`), a COMMIT marker likewise.
:func:`control_record_type` reads a control batch's marker type.

Thread safety: one pass, one thread.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker_embedded.record.control_record import ControlRecordType
from broker_embedded.record.record_batch import (
    RecordBatch,
)
from broker_embedded.storage.transaction_index import AbortedTxn


class CleanedTransactionMetadata:
    """Kafka's ``CleanedTransactionMetadata`` for one pass over a log (map or recopy)."""

    __slots__ = ("_aborted", "_next", "_ongoing_aborted", "_ongoing_committed", "cleaned_index")

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._ongoing_aborted: dict[int, list] = {}  # pid -> [AbortedTxn, last observed offset]
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: list[AbortedTxn] = []

    def _consume_up_to(self, offset: int) -> None:
        while self._next < len(self._aborted) and self._aborted[self._next].first_offset <= offset:
            txn = self._aborted[self._next]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])
            self._next += 1

    def on_batch(self, producer_id: int, last_offset: int) -> bool:
        """A transactional data batch; True when it belongs to an aborted transaction."""
        self._consume_up_to(last_offset)
        entry = self._ongoing_aborted.get(producer_id)
        if entry is not None:
            entry[1] = last_offset
            return True
        self._ongoing_committed.add(producer_id)
        return False

    def on_control_batch(
        self, producer_id: int, last_offset: int, control_type: ControlRecordType | None
    ) -> bool:
        """A control batch (``None``: it holds no record); True when it may be discarded."""
        self._consume_up_to(last_offset)
        if control_type is None:
            return True
        if control_type is ControlRecordType.ABORT:
            entry = self._ongoing_aborted.pop(producer_id, None)
            if entry is not None and entry[1] is not None:
                self.cleaned_index.append(entry[0])
                return False
            return True
        if control_type is ControlRecordType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False


def control_record_type(view: memoryview, where: str, position: int) -> ControlRecordType | None:
    batch = RecordBatch(view, where, position)
    record = next(iter(batch.records()), None)
    if record is None:
        return None
    return ControlRecordType.parse_key(
        record.key, source=where, position=position, base_offset=batch.base_offset
    )
