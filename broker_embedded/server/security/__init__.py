"""Listeners' security: TLS (``ssl``), SASL (PLAIN, SCRAM-SHA-256/512) and principals."""
