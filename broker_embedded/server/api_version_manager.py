"""Which APIs at which versions this broker serves (Kafka's ``ApiVersionManager``).

One table, keyed by API key, of inclusive version ranges. The API layer (``KafkaApis``) fills it
as it registers each API's handler, so what ApiVersions advertises is exactly what is handled.
The network layer asks :meth:`ApiVersionManager.is_enabled` for every request before parsing its
body: an API key or version outside the table closes the connection, as Kafka's processor does
("Received request api key ... which is not enabled"). ApiVersions is the exception: every
version is enabled, since a client sends its highest version before it knows ours, and an
unknown version is answered with the v0 fallback (KIP-511).

Invariant: every version of a registered range has a kio request and response schema (checked at
registration, in kio's index: the classes themselves load on a version's first request). Thread
safety: registration swaps an immutable mapping under a lock; readers take no lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import MappingProxyType

from broker_embedded.server.protocol import API_VERSIONS_KEY, api_name, has_schemas


@dataclass(frozen=True, slots=True)
class ApiRange:
    """An API key and the inclusive range of versions served."""

    api_key: int
    min_version: int
    max_version: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min_version <= version <= self.max_version


class ApiVersionManager:
    """The table of served API version ranges."""

    def __init__(self) -> None:
        self._ranges: MappingProxyType[int, ApiRange] = MappingProxyType({})
        self._lock = threading.Lock()

    def register(self, api_key: int, min_version: int, max_version: int) -> ApiRange:
        """Serve ``api_key`` at ``min_version..max_version``; ValueError when a version has no
        schema or the key is already registered."""
        if not 0 <= min_version <= max_version:
            raise ValueError(f"bad version range {min_version}..{max_version} for {api_key}")
        for version in range(min_version, max_version + 1):
            if not has_schemas(api_key, version):
                raise ValueError(
                    f"no kio schema for api key {api_key} ({api_name(api_key)}) v{version}"
                )
        entry = ApiRange(api_key, min_version, max_version)
        with self._lock:
            if api_key in self._ranges:
                raise ValueError(f"api key {api_key} ({api_name(api_key)}) is registered twice")
            self._ranges = MappingProxyType({**self._ranges, api_key: entry})
        return entry

    def range(self, api_key: int) -> ApiRange | None:
        return self._ranges.get(api_key)

    def ranges(self) -> tuple[ApiRange, ...]:
        """Every served range, by API key."""
        return tuple(sorted(self._ranges.values(), key=lambda r: r.api_key))

    def is_enabled(self, api_key: int, api_version: int) -> bool:
        """May a request of this key and version be read (Kafka's ``isApiEnabled``)?"""
        entry = self._ranges.get(api_key)
        if entry is None:
            return False
        return api_key == API_VERSIONS_KEY or api_version in entry
