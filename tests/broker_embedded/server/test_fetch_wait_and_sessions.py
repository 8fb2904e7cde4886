"""The Fetch API's long poll and fetch sessions over the wire.

- min_bytes / max_wait_ms: a fetch with no data waits in the purgatory and is answered by the
  append that brings data, or empty when max_wait_ms runs out; with ``num.io.threads=1`` a
  waiting fetch does not keep the only handler thread from answering other requests.
- KIP-227 sessions: a full fetch opens a session, an incremental one carries only the changed
  partitions, wrong epochs and unknown or evicted sessions get errors 71 and 70, and the client's
  fallback (a new full fetch) works.
"""

from __future__ import annotations

import threading
import time

from broker_embedded.server.fetch_session import FetchManager, FetchSessionCache
from tests.broker_embedded._broker_util import log_bytes
from tests.broker_embedded.server._fetch import (
    decode,
    expected,
    fetch_request,
    fetch_server,
    partition_data,
)
from tests.broker_embedded.server._net import API_VERSIONS_V3, RawClient

MB = 1 << 20


def test_long_poll_completes_on_new_data_without_holding_the_handler(broker):
    broker.create_topic("t", 1)
    with fetch_server(broker, io_threads=1) as (server, _), RawClient(server) as c:
        c.send(_frame(fetch_request(12, [("t", [(0, 0, MB, -1)])], max_wait_ms=8000), 7))
        time.sleep(0.3)
        # the only handler thread is free: another connection is answered while the fetch waits
        with RawClient(server) as other:
            started = time.monotonic()
            other.call(API_VERSIONS_V3)
            assert time.monotonic() - started < 1.0
        appended_at = time.monotonic()
        threading.Timer(0.2, lambda: broker.produce("t", 0, [b"late"])).start()
        got = decode(12, c.recv_frame(), 7)
        assert time.monotonic() - appended_at < 4.0  # answered by the append, not the 8 s wait
        want = partition_data(12, 0, hw=1, lso=1, log_start=0, records=log_bytes(broker, "t", 0))
        assert got == expected(12, [("t", [want])])


def test_long_poll_times_out_empty(broker):
    broker.create_topic("t", 1)
    broker.produce("t", 0, [b"x"])
    with fetch_server(broker, io_threads=1) as (server, _), RawClient(server) as c:
        started = time.monotonic()
        request = fetch_request(12, [("t", [(0, 1, MB, -1)])], max_wait_ms=400, min_bytes=1)
        got = decode(12, c.call(request))
        waited = time.monotonic() - started
        assert 0.35 <= waited < 3.0
        assert got == expected(12, [("t", [partition_data(12, 0, hw=1, lso=1, log_start=0)])])
        # min_bytes above what is there: waits for max_wait, then answers what there is
        request = fetch_request(12, [("t", [(0, 0, MB, -1)])], max_wait_ms=300, min_bytes=MB)
        started = time.monotonic()
        got = decode(12, c.call(request))
        assert time.monotonic() - started >= 0.25
        want = partition_data(12, 0, hw=1, lso=1, log_start=0, records=log_bytes(broker, "t", 0))
        assert got == expected(12, [("t", [want])])


def _frame(message, correlation_id):
    from tests.broker_embedded.server._net import request_frame

    return request_frame(message, correlation_id)


def test_sessions_full_then_incremental_with_only_changed_partitions(broker):
    broker.create_topic("t", 2)
    broker.produce("t", 0, [b"a"])
    broker.produce("t", 1, [b"b"])
    parts = [(0, 0, MB, -1), (1, 0, MB, -1)]
    with fetch_server(broker) as (server, _), RawClient(server) as c:
        full = decode(12, c.call(fetch_request(12, [("t", parts)], session_id=0, epoch=0)))
        sid = full.session_id
        assert sid != 0
        assert full == expected(
            12,
            [
                (
                    "t",
                    [
                        partition_data(
                            12, 0, hw=1, lso=1, log_start=0, records=log_bytes(broker, "t", 0)
                        ),
                        partition_data(
                            12, 1, hw=1, lso=1, log_start=0, records=log_bytes(broker, "t", 1)
                        ),
                    ],
                )
            ],
            session_id=sid,
        )
        # the consumer moved on to offset 1 on both: an incremental fetch updates them
        moved = [(0, 1, MB, -1), (1, 1, MB, -1)]
        inc = decode(12, c.call(fetch_request(12, [("t", moved)], session_id=sid, epoch=1)))
        assert inc == expected(12, [], session_id=sid)  # nothing changed
        before = len(log_bytes(broker, "t", 1))
        broker.produce("t", 1, [b"new"])
        inc = decode(12, c.call(fetch_request(12, [], session_id=sid, epoch=2)))
        want = partition_data(
            12, 1, hw=2, lso=2, log_start=0, records=log_bytes(broker, "t", 1)[before:]
        )
        assert inc == expected(12, [("t", [want])], session_id=sid)
        # a repeated epoch: INVALID_FETCH_SESSION_EPOCH; an unknown session: NOT_FOUND
        bad = decode(12, c.call(fetch_request(12, [], session_id=sid, epoch=2)))
        assert bad == expected(12, [], error=71)
        bad = decode(12, c.call(fetch_request(12, [], session_id=sid + 1, epoch=1)))
        assert bad == expected(12, [], error=70)
        # the consumer moves partition 1 on and forgets partition 0: nothing to send
        request = fetch_request(
            12, [("t", [(1, 2, MB, -1)])], session_id=sid, epoch=3, forgotten=[("t", [0])]
        )
        inc = decode(12, c.call(request))
        assert inc == expected(12, [], session_id=sid)
        closed = decode(12, c.call(fetch_request(12, [("t", moved)], session_id=sid, epoch=-1)))
        assert closed.session_id == 0 and len(closed.responses[0].partitions) == 2


def test_an_evicted_session_falls_back_to_a_full_fetch(broker):
    broker.create_topic("t", 3)
    now = [0]
    manager = FetchManager(FetchSessionCache(max_entries=1), clock=lambda: now[0])
    with fetch_server(broker, manager=manager) as (server, _), RawClient(server) as c:
        small = decode(13, c.call(_full(broker, [0])))
        assert small.session_id != 0
        now[0] = 200_000  # the small session is stale (unused for more than 120 s)
        big = decode(13, c.call(_full(broker, [1, 2])))  # takes the only slot
        assert big.session_id not in (0, small.session_id)
        gone = decode(13, c.call(fetch_request(13, [], session_id=small.session_id, epoch=1)))
        assert gone == expected(13, [], error=70)
        now[0] += 1
        again = decode(13, c.call(_full(broker, [0])))  # the client's fallback
        assert again.session_id == 0  # no room (the new session stays), answered sessionless
        tid = broker.describe_topic("t").topic_id
        assert again == expected(13, [(tid, [partition_data(13, 0, hw=0, lso=0, log_start=0)])])
        inc = decode(13, c.call(fetch_request(13, [], session_id=big.session_id, epoch=1)))
        assert inc == expected(13, [], session_id=big.session_id)


def _full(broker, partitions):
    tid = broker.describe_topic("t").topic_id
    parts = [(p, 0, MB, -1) for p in partitions]
    return fetch_request(13, [(tid, parts)], session_id=0, epoch=0)
