"""The server's TLS context (Python's ``ssl``) from a :class:`SecurityConfig`.

PEM only: ``ssl.keystore.location`` (a PEM file with the private key and certificate chain) or
the inline ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (written to a private
temporary file for ``load_cert_chain`` and removed at once); ``ssl.truststore.location`` or
``ssl.truststore.certificates`` for the CAs that sign client certificates.
``ssl.client.auth``: ``required`` (CERT_REQUIRED: no certificate, no handshake), ``requested``
(CERT_OPTIONAL), ``none`` (no certificate asked). TLS 1.2 is the lowest version accepted.

A missing or unreadable file is an :class:`InvalidConfigError` naming the key and path.
The context is built once per server and shared by its processors (``SSLContext`` is safe to
share between threads once configured).
"""

from __future__ import annotations

import os
import ssl
import tempfile

from broker_embedded.server.security.security_config import SecurityConfig
from broker_embedded.storage.log_config import InvalidConfigError

_VERIFY = {
    "required": ssl.CERT_REQUIRED,
    "requested": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}


def server_context(config: SecurityConfig) -> ssl.SSLContext:
    """The TLS context of the SSL and SASL_SSL listeners."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_keystore(context, config)
    context.verify_mode = _VERIFY[config.ssl_client_auth]
    if config.ssl_client_auth != "none":
        if not (config.ssl_truststore_location or config.ssl_truststore_certificates):
            raise InvalidConfigError(
                f"ssl.client.auth={config.ssl_client_auth} needs ssl.truststore.location or "
                "ssl.truststore.certificates (the CAs of the client certificates)"
            )
        try:
            if config.ssl_truststore_location:
                context.load_verify_locations(cafile=config.ssl_truststore_location)
            if config.ssl_truststore_certificates:
                context.load_verify_locations(cadata=config.ssl_truststore_certificates)
        except (OSError, ssl.SSLError) as e:
            raise InvalidConfigError(f"ssl.truststore: cannot load the CAs: {e}") from None
    return context


def _load_keystore(context: ssl.SSLContext, config: SecurityConfig) -> None:
    password = config.ssl_key_password or None
    if config.ssl_keystore_location:
        try:
            context.load_cert_chain(config.ssl_keystore_location, password=password)
        except (OSError, ssl.SSLError) as e:
            raise InvalidConfigError(
                f"ssl.keystore.location {config.ssl_keystore_location}: cannot load the key and "
                f"certificate chain: {e}"
            ) from None
        return
    if not (config.ssl_keystore_certificate_chain and config.ssl_keystore_key):
        raise InvalidConfigError(
            "an SSL or SASL_SSL listener needs ssl.keystore.location, or "
            "ssl.keystore.certificate.chain and ssl.keystore.key"
        )
    fd, path = tempfile.mkstemp(suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(config.ssl_keystore_key.strip() + "\n")
            f.write(config.ssl_keystore_certificate_chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    except (OSError, ssl.SSLError) as e:
        raise InvalidConfigError(
            f"ssl.keystore.certificate.chain / ssl.keystore.key: cannot load them: {e}"
        ) from None
    finally:
        os.unlink(path)
