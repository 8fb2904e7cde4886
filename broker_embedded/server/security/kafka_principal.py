"""Who a connection is (Kafka's ``KafkaPrincipal``): ``type:name``, e.g. ``User:alice``.

- PLAINTEXT, and SSL without a client certificate: ``User:ANONYMOUS``.
- SSL with a verified client certificate: ``User:`` + the certificate subject as Java's
  ``X500Principal.getName()`` writes it (RFC 2253: the RDNs last-to-first, ``CN=alice,OU=eng,
  O=example,C=US``), which is what Kafka's default principal builder answers.
- SASL (SASL_PLAINTEXT, SASL_SSL): ``User:`` + the authenticated user name.

Immutable values and pure functions: thread-safe. An authorizer matches on ``str(principal)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal type (``User``) and name."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal.user("ANONYMOUS")

# Python's getpeercert() attribute names -> the keywords X500Principal.getName() uses (RFC 2253
# and Java's additions); other attributes keep Python's name.
_RDN_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_RFC2253_SPECIAL = frozenset(',+"\\<>;')


def subject_name(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """An RFC 2253 distinguished name of a ``getpeercert()['subject']`` (RDNs in certificate
    order, each a sequence of (attribute, value) pairs)."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_RDN_KEYWORDS.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def certificate_principal(peer_cert: dict | None) -> KafkaPrincipal:
    """The principal of a verified peer certificate (``getpeercert()``); ANONYMOUS without one."""
    if not peer_cert or not peer_cert.get("subject"):
        return ANONYMOUS
    return KafkaPrincipal.user(subject_name(peer_cert["subject"]))


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in _RFC2253_SPECIAL else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out
