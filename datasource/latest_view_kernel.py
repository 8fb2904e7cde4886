"""The compiled (numba) kernels of the latest view (latest_view.py): no Python object per record.

Input: the columns of one decoded Arrow record batch, as numpy views of its buffers: the key
column's int32 value offsets (``n + 1`` of them, the array's own slice) and data bytes, a bool
array of which keys are non-null, and the int64 offset column. Keys are hashed with the
cleaner's MD5 (``skimpy_offset_map.md5``) and looked up or put in a :class:`SkimpyOffsetMap`
(its int64 words and state arrays: 24-byte slots, digest then big-endian offset).

Digests: ``mask`` (two int64 words ANDed into the digest) is all ones in production; tests
narrow it to force collisions. A digest that masks to all zeros becomes ``(0, 1)`` (an all-zero
slot means empty). Rounds: a key belongs to round ``(level, bucket)`` when the low ``level``
bits of its digest's word 1, shifted right by ``BUCKET_SHIFT``, equal ``bucket``.

Both passes hash ``LOOK_AHEAD`` keys ahead into a ``group`` table (``GROUP_FIELDS`` int64
columns) and prefetch their slots before probing, as the cleaner's kernels do (a slot of a map
larger than the caches costs a memory access).

- :func:`build_rows` (pass 1): put ``(digest, offset)`` for every keyed row of the round, in
  order (offsets increase, so a key's slot ends with its latest offset). Before a put that
  would add a key to a map at its bound (``max_desired`` entries) it returns that row's index:
  the caller splits the round and calls again from that row.
- :func:`take_entries` and :func:`put_entries` split a round: the entries whose bucket bit
  ``level`` is 0 are copied to ``tmp`` and put back into the cleared map (the others wait for
  round ``(level + 1, bucket | 1 << level)``).
- :func:`emit_rows` (pass 2): ``keep[i]`` for a keyed row of the round whose offset equals its
  key's slot. Collision check: ``fps`` (one int64 per slot) takes a seeded 64-bit FNV-1a hash
  of the first key seen in each slot; a later key of the slot with another hash flags the slot
  (``flags``). It returns the number of newly flagged slots.
- :func:`collided_rows` (pass 3, only after a flag): ``sel[i]`` is 0 for rows outside the
  flagged slots, 1 for a flagged row below its slot's offset, 2 for the slot's own row.

Bounds: the columns are the decoder's Arrow arrays (their offsets lie within their data); the
kernels index only rows ``[0, n)``, the map's slots and ``group``'s rows. Thread safety: they
touch only their arguments and release the GIL.
"""

from __future__ import annotations

import numpy as np

from broker_embedded.cleaner.skimpy_offset_map import (
    M_ENTRIES,
    M_MAX_DESIRED,
    M_SLOTS,
    map_put,
    map_slot,
    md5,
    prefetch_beside,
    prefetch_slot,
    slot_offset,
)
from broker_embedded.record.kernel_primitives import inline, jit

BUCKET_SHIFT = 40  # round buckets take digest word 1's bits from here (slots use bytes 0-3 first)
_FNV_BASIS = -3750763034362895579  # 0xCBF29CE484222325 as an int64
_FNV_PRIME = 0x100000001B3
LOOK_AHEAD = 16  # keys hashed (and their slots prefetched) before the first is probed
GROUP_FIELDS = 4  # digest words, offset, row


@inline
def _digest(koff, kdata, i, scratch, mask0, mask1):  # type: ignore[no-untyped-def]
    start = np.int64(koff[i])
    h0, h1 = md5(kdata, start, np.int64(koff[i + 1]) - start, scratch)
    h0 &= mask0
    h1 &= mask1
    if h0 == 0 and h1 == 0:
        h1 = np.int64(1)
    return h0, h1


@inline
def _bucket(h1, level):  # type: ignore[no-untyped-def]
    return (h1 >> BUCKET_SHIFT) & ((np.int64(1) << level) - 1)


@inline
def _fingerprint(kdata, start, end, seed):  # type: ignore[no-untyped-def]
    """Seeded FNV-1a 64 of ``kdata[start:end]``, never 0 (0 marks an unseen slot)."""
    h = _FNV_BASIS ^ seed
    for j in range(start, end):
        h = (h ^ np.int64(kdata[j])) * _FNV_PRIME
    return h | 1


@jit
def _hash_ahead(
    koff,
    kdata,
    kvalid,
    offsets,
    i,
    words,
    state,
    scratch,
    level,
    bucket,
    mask0,
    mask1,
    group,
    beside,
):  # type: ignore[no-untyped-def]
    """Hash the keys of the round from row ``i`` into ``group`` rows (digest, offset, row) and
    prefetch their first slots (and their elements of ``beside``, one per slot, when it has
    any), up to ``len(group)`` of them; (rows hashed, next row)."""
    n = offsets.shape[0]
    pending = 0
    while i < n and pending < group.shape[0]:
        if kvalid[i]:
            h0, h1 = _digest(koff, kdata, i, scratch, mask0, mask1)
            if _bucket(h1, level) == bucket:
                prefetch_slot(words, state, h0, h1)
                if beside.shape[0]:
                    prefetch_beside(beside, state, h0, h1)
                group[pending, 0] = h0
                group[pending, 1] = h1
                group[pending, 2] = offsets[i]
                group[pending, 3] = i
                pending += 1
        i += 1
    return pending, i


@jit
def build_rows(
    koff, kdata, kvalid, offsets, words, state, scratch, level, bucket, mask0, mask1, group, i0
):  # type: ignore[no-untyped-def]
    """Pass 1 from row ``i0`` (module docstring), ``LOOK_AHEAD`` keys hashed and prefetched at
    a time: ``len(offsets)`` when every row is put, else the row at which the map reached its
    bound."""
    i = i0
    while i < offsets.shape[0]:
        pending, i = _hash_ahead(
            koff,
            kdata,
            kvalid,
            offsets,
            i,
            words,
            state,
            scratch,
            level,
            bucket,
            mask0,
            mask1,
            group,
            group[:0, 0],
        )
        for g in range(pending):
            h0, h1 = group[g, 0], group[g, 1]
            if state[M_ENTRIES] >= state[M_MAX_DESIRED] and map_slot(words, state, h0, h1) < 0:
                return group[g, 3]
            map_put(words, state, h0, h1, group[g, 2])
    return np.int64(offsets.shape[0])


@jit
def take_entries(words, state, level, tmp):  # type: ignore[no-untyped-def]
    """Copy the entries whose bucket bit ``level`` is 0 into ``tmp`` rows; their count."""
    kept = np.int64(0)
    for s in range(state[M_SLOTS]):
        h0, h1, be = words[3 * s], words[3 * s + 1], words[3 * s + 2]
        if (h0 == 0 and h1 == 0 and be == 0) or (h1 >> (BUCKET_SHIFT + level)) & 1:
            continue
        tmp[kept, 0] = h0
        tmp[kept, 1] = h1
        tmp[kept, 2] = slot_offset(words, s)
        kept += 1
    return kept


@jit
def put_entries(words, state, tmp, kept):  # type: ignore[no-untyped-def]
    for j in range(kept):
        map_put(words, state, tmp[j, 0], tmp[j, 1], tmp[j, 2])


@jit
def emit_rows(
    koff,
    kdata,
    kvalid,
    offsets,
    words,
    state,
    scratch,
    level,
    bucket,
    mask0,
    mask1,
    group,
    seed,
    fps,
    flags,
    keep,
):  # type: ignore[no-untyped-def]
    """Pass 2 (module docstring), keys hashed and prefetched ``LOOK_AHEAD`` at a time: fills
    ``keep``; the number of newly flagged slots."""
    flagged = np.int64(0)
    keep[:] = False
    i = np.int64(0)
    while i < offsets.shape[0]:
        pending, i = _hash_ahead(
            koff,
            kdata,
            kvalid,
            offsets,
            i,
            words,
            state,
            scratch,
            level,
            bucket,
            mask0,
            mask1,
            group,
            fps,
        )
        for g in range(pending):
            s = map_slot(words, state, group[g, 0], group[g, 1])
            if s < 0:
                continue  # not put in pass 1: the log changed under the read (latest_view.py)
            r = group[g, 3]
            fp = _fingerprint(kdata, np.int64(koff[r]), np.int64(koff[r + 1]), seed)
            if fps[s] == 0:
                fps[s] = fp
            elif fps[s] != fp and not flags[s]:
                flags[s] = True
                flagged += 1
            keep[r] = group[g, 2] == slot_offset(words, s)
    return flagged


@jit
def collided_rows(
    koff,
    kdata,
    kvalid,
    offsets,
    words,
    state,
    scratch,
    level,
    bucket,
    mask0,
    mask1,
    group,
    flags,
    sel,
):  # type: ignore[no-untyped-def]
    """Pass 3 (module docstring): fills ``sel``; the number of rows in flagged slots."""
    found = np.int64(0)
    sel[:] = 0
    i = np.int64(0)
    while i < offsets.shape[0]:
        pending, i = _hash_ahead(
            koff,
            kdata,
            kvalid,
            offsets,
            i,
            words,
            state,
            scratch,
            level,
            bucket,
            mask0,
            mask1,
            group,
            group[:0, 0],
        )
        for g in range(pending):
            s = map_slot(words, state, group[g, 0], group[g, 1])
            if s >= 0 and flags[s]:
                sel[group[g, 3]] = 2 if group[g, 2] == slot_offset(words, s) else 1
                found += 1
    return found
