"""Keeping the segment regions of Fetch responses valid while ``sendfile`` sends them.

A zero-copy read (storage/fetch_data_info.py ``SegmentRegion``) names ``length`` bytes of a
segment's ``.log`` from ``position``, with the ``(st_dev, st_ino)`` of the file it read. Before
the response goes out, :meth:`RegionPins.pin` opens that path and checks, on the descriptor:

- it is the same file (``fstat`` gives the recorded ``file_id``): a cleaner swap renames another
  file over the path, retention renames it away and unlinks it; either way the open fails or
  names another file;
- it still holds the region (``st_size >= position + length``): a truncation shortens the file.

From then on the region is sent from that descriptor (a :class:`FileRegion` with ``fd``): renames
and unlinks do not touch an open inode, and the active segment's later appends lie past the region
(only bytes up to the bound computed at read time are sent). The descriptor is closed by
:meth:`RegionPins.release` from the response's ``on_done`` (written, dropped or its connection
closed). A truncation of the same file after the pin (a leader that becomes a follower truncating
above its high watermark) makes ``sendfile`` come up short and the network layer closes that
connection, since the frame's size has already gone out; the consumer reconnects and fetches again.

Outcomes of :meth:`pin`: a :class:`FileRegion` (pinned); ``None`` when the file is gone, replaced
or too short (the caller sends that partition without records: the consumer fetches the same
offset again and reads the new files); or, when ``max_open`` descriptors are already pinned:

- the region's bytes read at once with ``os.pread`` from a briefly opened descriptor (a copy),
  while ``budget`` (``queued.max.response.bytes``, a :class:`MemoryPool`) has room for the whole
  region; the copy's bytes go back to it when the response is written, dropped or its
  connection closed;
- else a :class:`FileRegion` by ``path`` and ``file_id``: the network thread opens the file when
  it sends the region, checks it is the same file, and closes it whenever the socket is full,
  so a client that does not read holds neither memory nor a descriptor. A file replaced or
  truncated before it is sent closes that connection (the frame size is out); the consumer
  reconnects and fetches again.

So the descriptors held by responses in flight never exceed ``max_open``, and the record bytes
they hold in memory never exceed the budget. A process out of descriptors (EMFILE/ENFILE) also
gets ``None`` and one log line.

Thread safety: the counters are guarded by locks; pins are made and released from any thread.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field

from broker_embedded.server.request_channel import FileRegion, MemoryPool
from broker_embedded.storage.fetch_data_info import SegmentRegion
from broker_embedded.storage.open_files import is_too_many_open_files

log = logging.getLogger(__name__)

DEFAULT_MAX_PINNED = 1024
DEFAULT_COPY_BUDGET = 64 << 20


@dataclass
class Held:
    """What one response holds until its ``on_done``: pinned descriptors and copied bytes."""

    fds: list[int] = field(default_factory=list)
    copied: int = 0


class RegionPins:
    """Descriptors held for regions being sent, at most ``max_open`` at a time, and copies
    within ``budget`` bytes."""

    def __init__(
        self, max_open: int = DEFAULT_MAX_PINNED, budget: MemoryPool | None = None
    ) -> None:
        if max_open < 0:
            raise ValueError(f"max pinned regions must be >= 0, not {max_open}")
        self.max_open = max_open
        self.budget = budget if budget is not None else MemoryPool(DEFAULT_COPY_BUDGET)
        self._open = 0
        self._lock = threading.Lock()
        self.copies = 0  # regions sent as copies because the limit was reached
        self.from_files = 0  # regions sent from their path: no descriptor and no budget left
        self.misses = 0  # regions whose file was gone, replaced or too short

    @property
    def open(self) -> int:
        """Descriptors pinned now."""
        return self._open

    def pin(self, region: SegmentRegion, held: Held) -> FileRegion | bytes | None:
        """The region pinned (its descriptor added to ``held``), copied (its size added), sent
        from its path, or ``None``; see the module docstring."""
        try:
            fd = os.open(region.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return self._miss()
        except OSError as e:
            if not is_too_many_open_files(e):
                raise
            log.warning("cannot pin %s for a fetch response: %s", region.path, e)
            return self._miss()
        try:
            st = os.fstat(fd)
            intact = (st.st_dev, st.st_ino) == region.file_id
            if not intact or st.st_size < region.position + region.length:
                return self._miss()
            if self._take():
                held.fds.append(fd)
                fd = -1
                return FileRegion(region.position, region.length, fd=held.fds[-1])
            if not self.budget.try_reserve(region.length, strict=True):
                self.from_files += 1
                return FileRegion(
                    region.position, region.length, path=region.path, file_id=region.file_id
                )
            held.copied += region.length
            self.copies += 1
            return os.pread(fd, region.length, region.position)
        finally:
            if fd >= 0:
                os.close(fd)

    def _miss(self) -> None:
        self.misses += 1
        return None

    def _take(self) -> bool:
        with self._lock:
            if self._open >= self.max_open:
                return False
            self._open += 1
            return True

    def release(self, held: Held) -> None:
        """Close the descriptors of one response and give its copies' bytes back (its
        ``on_done``)."""
        self.budget.release(held.copied)
        held.copied = 0
        for fd in held.fds:
            try:
                os.close(fd)
            finally:
                with self._lock:
                    self._open -= 1
