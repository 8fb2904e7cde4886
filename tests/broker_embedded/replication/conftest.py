"""``make_cluster``: embedded clusters on tmp dirs, every one closed after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_embedded.cluster import EmbeddedCluster
from tests.broker_embedded.replication._cluster_util import fast_config


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., EmbeddedCluster]]:
    opened: list[EmbeddedCluster] = []

    def make(num_brokers: int = 3, *, base_dir: Path | None = None, **kwargs) -> EmbeddedCluster:
        kwargs.setdefault("config", fast_config())
        cluster = EmbeddedCluster(base_dir or tmp_path / "cluster", num_brokers, **kwargs)
        opened.append(cluster)
        return cluster

    yield make
    errors = []
    for cluster in reversed(opened):
        try:
            cluster.close()
        except Exception as e:  # close the others anyway
            errors.append(e)
    if errors:
        raise errors[0]
