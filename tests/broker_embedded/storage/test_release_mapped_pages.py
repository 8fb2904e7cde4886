"""``open_files.release_mapped_pages``: the pages of a read-only mapping up to the end of a slice
leave this process (``/proc/self/pagemap`` says which pages are present), the bytes read the
same afterwards, and anything that is not such a mapping is left alone."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import numpy as np

from broker_embedded.storage.open_files import map_read_only, release_mapped_pages

SIZE = 8 << 20


def present_pages(view: memoryview) -> np.ndarray:
    """Whether each page of ``view`` is mapped in this process (bit 63 of its pagemap entry)."""
    start = np.frombuffer(view, np.uint8).ctypes.data // mmap.PAGESIZE
    count = -(-view.nbytes // mmap.PAGESIZE)
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(start * 8)
        entries = struct.unpack(f"<{count}Q", pagemap.read(count * 8))
    return np.array([e >> 63 for e in entries], dtype=bool)


def test_pages_behind_a_slice_are_released_and_read_the_same(tmp_path: Path) -> None:
    data = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    view, _ = map_read_only(path)
    assert bytes(view) == data  # every page touched
    assert present_pages(view).all()
    half = SIZE // 2
    assert release_mapped_pages(view[half - 100 : half])
    present = present_pages(view)
    assert not present[: half // mmap.PAGESIZE].any()
    assert present[half // mmap.PAGESIZE :].all()
    assert bytes(view) == data  # faulted in again from the file


def test_around_releases_the_slice_and_that_much_either_side_only(tmp_path: Path) -> None:
    """Bounds on 2 MiB: a file system with huge pages (tmpfs ``huge=``) releases whole ones."""
    data = bytes(range(256)) * (SIZE // 256)
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    view, _ = map_read_only(path)
    assert bytes(view) == data
    page, mib = mmap.PAGESIZE, 1 << 20
    assert release_mapped_pages(view[3 * mib : 5 * mib], around=mib)
    expected = np.ones(SIZE // page, dtype=bool)
    expected[2 * mib // page : 6 * mib // page] = False
    assert (present_pages(view) == expected).all()
    assert release_mapped_pages(view[SIZE - 10 :], around=2 * mib - 10)  # to the mapping's end
    expected[6 * mib // page :] = False
    assert (present_pages(view) == expected).all()
    assert bytes(view) == data


def test_anything_but_a_mapping_is_left_alone() -> None:
    heap = bytearray(b"x" * (1 << 20))
    assert not release_mapped_pages(memoryview(heap))
    assert not release_mapped_pages(b"bytes")
    assert not release_mapped_pages(memoryview(b""))
    assert heap == b"x" * (1 << 20)
