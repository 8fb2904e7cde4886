"""SASL inputs of the ``wire`` fuzz target: mutated SaslHandshake / SaslAuthenticate frames
against the target's SASL_PLAINTEXT listener.

One input (:class:`SaslInput`): a mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), the
SaslHandshake version (v0: the tokens follow as raw size-prefixed frames; v1: each in a
SaslAuthenticate request, v0-2) and the step whose frame is mutated (0 the handshake, 1 the
first token: PLAIN's ``\\0user\\0password`` or SCRAM's client-first, 2 SCRAM's client-final,
computed from the server's live server-first). The steps before it are sent valid and their
answers read; the mutated frame (``_fuzz_wire_frames.mutate_frame``) is sent, its answers read
within ``READ_S``, and the connection closed. The oracle is the target's (``_fuzz_wire``): the
answers to Kafka-framed steps decode as their API's responses (raw v0 tokens are not checked),
nothing but one-line connection messages is logged, no server thread ends; plus
:func:`sasl_probe`, a valid SCRAM login on a fresh connection, within ``PROBE_S``.

The credentials: user :data:`USER` with both SCRAM mechanisms in the log dir; a failed
authentication is answered after :data:`DELAY_MS` (the server's delay, small so a campaign
stays fast). Every exchange is bounded: at most 3 frames, each answer read with a timeout.

Thread safety: driven by the campaign's one thread, as the rest of the target.
"""

from __future__ import annotations

import base64
import random
import struct
from dataclasses import dataclass
from pathlib import Path

import scramp
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest as AuthV0
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest as AuthV1
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest as AuthV2
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as HandshakeV1

from benchmarks._fuzz_oracle import Finding
from benchmarks._fuzz_wire import PROBE_S, Conn, check_responses, decode_response, read_responses
from benchmarks._fuzz_wire_frames import Frame, frame_of, mutate_frame, split_frames
from broker_embedded.server.security.scram_credentials import CredentialStore, ScramCredential
from broker_embedded.server.security.security_config import SecurityConfig

USER, PASSWORD = "fuzz", "fuzz-secret"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DELAY_MS = 20
LISTENER = "SASL_PLAINTEXT"
HANDSHAKES = (HandshakeV0, HandshakeV1)
AUTHENTICATES = (AuthV0, AuthV1, AuthV2)
SASL_AUTHENTICATE = 36
MAX_RECEIVE = SecurityConfig().sasl_server_max_receive_size  # the largest frame before auth
_SIZE = struct.Struct(">i")


def security() -> SecurityConfig:
    """The target server's [security]: every mechanism, a short failure delay, no lockout (the
    failed-authentication limits would refuse the probe's valid login after a few failed
    inputs; tests/broker_embedded/server/test_authentication_limiter.py tests them)."""
    return SecurityConfig(
        connection_failed_authentication_delay_ms=DELAY_MS,
        authentication_failure_max_delay_ms=DELAY_MS,
        authentication_failure_limit_per_principal=0,
        authentication_failure_limit_per_host=0,
    )


def add_user(log_dir: Path) -> None:
    store = CredentialStore(log_dir)
    for mechanism in SCRAM:
        store.upsert(USER, mechanism, ScramCredential.from_password(mechanism, PASSWORD))


@dataclass(frozen=True)
class SaslInput:
    """What one SASL input does (module docstring)."""

    mechanism: str
    handshake_version: int  # 0: raw tokens; 1: SaslAuthenticate
    auth_version: int  # SaslAuthenticate's version
    step: int  # the mutated frame: 0 handshake, 1 first token, 2 SCRAM's client-final

    @classmethod
    def draw(cls, rng: random.Random) -> SaslInput:
        mechanism = rng.choice(MECHANISMS)
        steps = 3 if mechanism in SCRAM else 2
        return cls(mechanism, rng.choice((0, 1, 1)), rng.randrange(3), rng.randrange(steps))


class Exchange:
    """The client side of one authentication: the frame of each step, valid."""

    def __init__(self, plan: SaslInput) -> None:
        self.plan = plan
        self.scram = (
            scramp.ScramClient([plan.mechanism], USER, PASSWORD)
            if plan.mechanism in SCRAM
            else None
        )

    def frame(self, step: int, server_token: bytes | None) -> Frame:
        """Step ``step``'s frame (``server_token``: the server's last token, for client-final)."""
        plan = self.plan
        if step == 0:
            version = plan.handshake_version
            message = HANDSHAKES[version](mechanism=plan.mechanism)
            return Frame(f"SaslHandshakev{version}", 17, version, frame_of(message, 1))
        token = self._token(step, server_token)
        if plan.handshake_version == 0:  # raw: a size prefix and the token
            return Frame("raw-token", SASL_AUTHENTICATE, 0, _SIZE.pack(len(token)) + token)
        message = AUTHENTICATES[plan.auth_version](auth_bytes=token)
        name = f"SaslAuthenticatev{plan.auth_version}"
        return Frame(name, SASL_AUTHENTICATE, plan.auth_version, frame_of(message, 1 + step))

    def _token(self, step: int, server_token: bytes | None) -> bytes:
        if self.scram is None:
            return f"\0{USER}\0{PASSWORD}".encode()
        if step == 1:
            return self.scram.get_client_first().encode()
        self.scram.set_server_first((server_token or b"").decode("utf-8", "replace"))
        return self.scram.get_client_final().encode()


def deliver(
    port: int, plan: SaslInput, rng: random.Random, other: Frame, fixed: bytes | None = None
) -> tuple[bytes, str]:
    """Send one input (module docstring); the mutated frame's bytes and the mutation
    (``fixed``: send these bytes at the mutated step instead, to replay). A Finding when an
    answer does not decode; the server closing the connection is allowed."""
    exchange = Exchange(plan)
    conn = Conn(port, PROBE_S)
    data, kind = b"", "none"
    try:
        token = None
        for step in range(plan.step):
            frame = exchange.frame(step, token)
            conn.sock.sendall(frame.data)
            token = _answer(frame, conn.recv_frame())
        frame = exchange.frame(plan.step, token)
        data, kind = (fixed, "replay") if fixed is not None else mutate_frame(frame, other, rng)
        conn.sock.sendall(data)
        if frame.name == "raw-token":  # the answer is a raw token (or a close): not checked
            read_responses(conn, 1)
        else:
            requests, _ = split_frames(data, MAX_RECEIVE)
            check_responses(requests, read_responses(conn, len(requests))[0])
    except OSError:
        pass  # closed by the server: allowed, the probes judge the rest
    finally:
        conn.close()
    return data, kind


def _answer(frame: Frame, response: bytes) -> bytes:
    """The server's token in the answer to a valid step (a Finding when the step failed)."""
    if frame.name == "raw-token":
        return response
    try:
        body = decode_response(frame.data[4:], response)
    except ValueError as e:
        raise Finding("response", f"{frame.name}: {e}") from None
    if body.error_code != 0:
        raise Finding("response", f"valid {frame.name} answered error {body.error_code}")
    return getattr(body, "auth_bytes", b"")


def sasl_probe(port: int) -> None:
    """A valid SCRAM-SHA-256 login on a fresh connection (a Finding if it fails)."""
    plan = SaslInput("SCRAM-SHA-256", 1, 2, 2)
    exchange = Exchange(plan)
    try:
        conn = Conn(port, PROBE_S)
    except OSError as e:
        raise Finding("probe", f"SASL: cannot connect: {e!r}") from None
    try:
        token = None
        for step in range(3):
            frame = exchange.frame(step, token)
            conn.sock.sendall(frame.data)
            token = _answer(frame, conn.recv_frame())
    except (OSError, ValueError, scramp.ScramException) as e:
        raise Finding("probe", f"SASL login: {type(e).__name__}: {e}") from None
    except Finding as f:
        raise Finding("probe", f"SASL login: {f.detail}") from None
    finally:
        conn.close()


def reproducer(plan: SaslInput, data: bytes, kind: str) -> dict:
    return {
        "sasl": plan.__dict__,
        "mutation": kind,
        "input_base64": base64.b64encode(data).decode("ascii"),
    }
