"""The writing and TLS side of a network thread (Kafka's ``TransportLayer``: plaintext and SSL):
:class:`TransportLayer`, a base class of :class:`~broker_embedded.server.processor.Processor`
holding its TLS handshake steps and its response writes (byte buffers with ``sendmsg``, at most
:data:`MAX_SENDMSG_BUFFERS` a call; file regions with ``os.sendfile``).

TLS (SSL, SASL_SSL): the processor wraps the accepted socket (``do_handshake_on_connect`` off)
and drives the handshake from its selector, one ``do_handshake`` per readiness event
(``SSLWantRead`` / ``SSLWantWrite`` choose the interest), so a handshake never blocks the loop.
Bytes go through ``SSLSocket.send`` (no ``sendmsg``), and a :class:`FileRegion` is read with
``os.pread`` in :data:`TLS_CHUNK` pieces and sent encrypted: ``sendfile`` cannot go through
TLS, so TLS connections alone take this copy path; PLAINTEXT keeps zero-copy. Decrypted bytes
that ``ssl`` buffered while the connection was muted are read when it is unmuted (the
selector cannot see them).

Thread safety: processor thread only; the methods work on the processor's state (its
connections, poller and pending TLS set), so this class is never used alone.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Sequence
from typing import Any

from broker_embedded.server.kafka_channel import ChannelError, KafkaChannel
from broker_embedded.server.request_channel import (
    FileRegion,
)
from broker_embedded.server.security.kafka_principal import (
    certificate_principal,
)
from broker_embedded.server.selector import READ, WRITE

MAX_SENDMSG_BUFFERS = 64
TLS_CHUNK = 256 << 10  # bytes copied into one SSLSocket.send (a FileRegion: one pread)


class TransportLayer:
    """The TLS handshake and the response writes of a processor (module docstring)."""

    def _handshake(self, conn: KafkaChannel) -> None:
        """One step of the TLS handshake; on completion the connection reads requests."""
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._update_events(conn, READ)
            return
        except ssl.SSLWantWriteError:
            self._update_events(conn, WRITE)
            return
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
            self._close(conn, f"TLS handshake failed: {e}")
            return
        conn.handshaking = False
        conn.last_active = time.monotonic()
        if conn.sasl is None:  # SSL: the certificate is who the client is
            conn.principal = certificate_principal(sock.getpeercert())
        self._update_events(conn)
        if sock.pending():
            self._tls_pending.add(conn.id)

    def _read_tls_pending(self) -> None:
        """Read the TLS connections whose decrypted bytes wait inside ``ssl`` (not visible to
        the selector) now that they are unmuted."""
        pending, self._tls_pending = self._tls_pending, set()
        for conn_id in pending:
            conn = self._connections.get(conn_id)
            if conn is not None and not conn.in_flight:
                self._read(conn)

    def _write(self, conn: KafkaChannel) -> None:
        response = conn.response
        assert response is not None
        parts = response.parts
        try:
            while conn.part < len(parts):
                part = parts[conn.part]
                sent = (
                    self._send_file(conn, part)
                    if isinstance(part, FileRegion)
                    else self._send_buffers(conn, parts)
                )
                if not sent:
                    self._update_events(conn)  # wait until writable
                    return
        except ChannelError as e:
            self._close(conn, str(e))
            return
        self._finish_response(conn, response)

    def _send_buffers(self, conn: KafkaChannel, parts: Sequence[object]) -> bool:
        """sendmsg of the byte parts from the current one up to the next file region; False
        when the socket takes nothing now."""
        views = [memoryview(parts[conn.part])[conn.offset :]]  # type: ignore[arg-type]
        for part in parts[conn.part + 1 : conn.part + MAX_SENDMSG_BUFFERS]:
            if isinstance(part, FileRegion):
                break
            views.append(memoryview(part))  # type: ignore[arg-type]
        try:
            n = self._send_tls(conn, _tls_chunk(views)) if conn.tls else conn.sock.sendmsg(views)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as e:
            raise ChannelError(f"write failed: {e}") from None
        conn.last_active = time.monotonic()
        for view in views:
            if n < len(view):
                conn.offset += n
                return True
            n -= len(view)
            conn.part += 1
            conn.offset = 0
        return True

    def _send_file(self, conn: KafkaChannel, region: FileRegion) -> bool:
        """One os.sendfile of the region's rest; False when the socket takes nothing now."""
        remaining = region.length - conn.offset
        if remaining:
            fd = self._region_fd(conn, region)
            try:
                if conn.tls:  # sendfile cannot encrypt: a copy through ssl
                    chunk = os.pread(fd, min(remaining, TLS_CHUNK), region.position + conn.offset)
                    n = self._send_tls(conn, chunk) if chunk else 0
                else:
                    n = os.sendfile(
                        conn.sock.fileno(),
                        fd,
                        region.position + conn.offset,
                        min(remaining, 1 << 30),
                    )
            except (BlockingIOError, InterruptedError):
                self._close_region_file(conn)  # a path region is opened again when writable
                return False
            except OSError as e:
                raise ChannelError(f"sendfile of {region.name} failed: {e}") from None
            if n == 0:
                raise ChannelError(
                    f"{region.name} ends before byte {region.position + region.length} of its "
                    "file region"
                )
            conn.last_active = time.monotonic()
            conn.offset += n
            if n < remaining:
                return True
        self._close_region_file(conn)
        conn.part += 1
        conn.offset = 0
        return True

    @staticmethod
    def _send_tls(conn: KafkaChannel, data: Any) -> int:
        """One ``SSLSocket.send``; BlockingIOError while TLS wants to wait (a retry sends the
        same bytes again, as OpenSSL requires)."""
        try:
            return conn.sock.send(data)
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
            raise BlockingIOError from None

    def _region_fd(self, conn: KafkaChannel, region: FileRegion) -> int:
        if region.fd is not None:
            return region.fd
        if conn.file_fd is None:
            try:
                fd = os.open(region.path, os.O_RDONLY | os.O_CLOEXEC)  # type: ignore[arg-type]
            except OSError as e:
                raise ChannelError(f"cannot open {region.path}: {e}") from None
            conn.file_fd = fd
            if region.file_id is not None:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != region.file_id:
                    raise ChannelError(f"{region.path} was replaced while it was being sent")
        return conn.file_fd

    def _close_region_file(self, conn: KafkaChannel) -> None:
        if conn.file_fd is not None:
            os.close(conn.file_fd)
            conn.file_fd = None


def _tls_chunk(views: list[memoryview]) -> memoryview | bytes:
    """Up to :data:`TLS_CHUNK` bytes of ``views`` for one ``SSLSocket.send`` (a copy when
    several small buffers are joined)."""
    if len(views) == 1 or len(views[0]) >= TLS_CHUNK:
        return views[0][:TLS_CHUNK]
    taken, size = [], 0
    for view in views:
        taken.append(view[: TLS_CHUNK - size])
        size += len(taken[-1])
        if size >= TLS_CHUNK:
            break
    return b"".join(taken)
