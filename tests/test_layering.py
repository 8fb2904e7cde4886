"""The packages depend one way: spark_kafkalog -> datasource -> broker_embedded; and the data
source reads the log only through the fetch interface (broker_embedded/storage/fetch_source.py
and its implementations), never the storage's segments, indexes or partition views directly.

Inside broker_embedded, the packages below the facade (record, storage, replication, cleaner,
replica_manager, coordinator, client) never import the facade (broker.py, cluster.py) or the
network layer (server/); and of the project's packages only server/ itself and the command line
that starts it import server/ (tests and benchmarks may).

Checked statically over every module's import statements (including imports inside functions),
so a forbidden import fails here even on a code path no other test runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "broker_embedded": ("datasource", "spark_kafkalog", "pyspark", "pyspark_kafkalog"),
    "datasource": ("spark_kafkalog",),
}
# storage modules behind the FetchSource: the data source plans, fetches and decodes only
STORAGE_INTERNALS = tuple(
    f"broker_embedded.storage.{name}"
    for name in ("partition_reader", "log_segment", "offset_index", "time_index", "log_dir")
)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def violations(package: str) -> list[str]:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in imported_modules(path):
            if module.split(".")[0] in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return bad


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_layering(package: str) -> None:
    assert violations(package) == []


def test_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from datasource import x\n    import pyspark.sql\n")
    assert imported_modules(module) == [(2, "datasource"), (3, "pyspark.sql")]


def imported_names(path: Path) -> list[tuple[int, str]]:
    """Every module imported, and every ``from M import n`` as ``M.n`` too."""
    found = imported_modules(path)
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def storage_violations(package: str) -> list[str]:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in imported_names(path):
            if under(module, STORAGE_INTERNALS):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return bad


def test_data_source_reads_only_through_the_fetch_source() -> None:
    assert storage_violations("datasource") == []


def test_checker_sees_a_storage_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from broker_embedded.storage import log_dir\n")
    assert imported_names(module) == [(1, "broker_embedded.storage"),
                                      (1, "broker_embedded.storage.log_dir")]  # fmt: skip


BELOW_FACADE = ("record", "storage", "replication", "cleaner", "replica_manager", "coordinator",
                "client", "protocol")  # fmt: skip
FACADE = ("broker_embedded.broker", "broker_embedded.cluster", "broker_embedded.server")
# (file, module) imports that break a rule today, each for a stated reason; a new one fails.
KNOWN_FACADE_IMPORTS = {
    # type hints only (under TYPE_CHECKING): the controller registers Broker objects
    ("broker_embedded/replication/controller.py", "broker_embedded.broker"),
}
SERVER = "broker_embedded.server"
# who may import the network layer: itself, and the `kafkalog` command line (`kafkalog serve`)
SERVER_IMPORTERS = (
    "broker_embedded/server/",
    "spark_kafkalog/cli.py",
    "spark_kafkalog/serve_command.py",
    "spark_kafkalog/users_command.py",
    "spark_kafkalog/acls_command.py",
)  # `kafkalog users` and `kafkalog acls`: the server's users and ACLs
SOURCE_PACKAGES = ("broker_embedded", "datasource", "spark_kafkalog", "pyspark_kafkalog", "jobs")


def imports_of(
    root: Path, paths: list[Path], prefixes: tuple[str, ...]
) -> list[tuple[str, int, str]]:
    """(file relative to ``root``, line, module) of every import of a module under ``prefixes``,
    one per import statement (``from broker_embedded import server`` counts as
    ``broker_embedded.server``, ``from broker_embedded.broker import Broker`` as
    ``broker_embedded.broker``)."""
    found: dict[tuple[str, int], str] = {}
    for path in paths:
        for line, module in imported_names(path):
            key = (path.relative_to(root).as_posix(), line)
            if under(module, prefixes) and len(module) < len(found.get(key, module + ".")):
                found[key] = module
    return sorted((file, line, module) for (file, line), module in found.items())


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def facade_violations(root: Path = ROOT) -> list[str]:
    paths = [p for pkg in BELOW_FACADE for p in (root / "broker_embedded" / pkg).rglob("*.py")]
    return [
        f"{file}:{line} imports {module}"
        for file, line, module in imports_of(root, paths, FACADE)
        if (file, module) not in KNOWN_FACADE_IMPORTS
    ]


def server_violations(root: Path = ROOT) -> list[str]:
    paths = [p for pkg in SOURCE_PACKAGES for p in (root / pkg).rglob("*.py")]
    return [
        f"{file}:{line} imports {module}"
        for file, line, module in imports_of(root, paths, (SERVER,))
        if not file.startswith(SERVER_IMPORTERS)
    ]


def test_packages_below_the_facade_do_not_import_it() -> None:
    assert facade_violations() == []


def test_only_the_server_and_its_command_import_the_server() -> None:
    assert server_violations() == []


def test_checker_sees_a_facade_or_server_import(tmp_path: Path) -> None:
    files = {
        "broker_embedded/storage/a.py": "from broker_embedded import server\n",
        "broker_embedded/client/b.py": "def f():\n    import broker_embedded.broker\n",
        "broker_embedded/replication/controller.py": "from broker_embedded.broker import Broker\n",
        "broker_embedded/server/c.py": "from broker_embedded.server import d\n",
        "datasource/e.py": "from broker_embedded.server.d import X\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert facade_violations(tmp_path) == [
        "broker_embedded/client/b.py:2 imports broker_embedded.broker",
        "broker_embedded/storage/a.py:1 imports broker_embedded.server",
    ]
    assert server_violations(tmp_path) == [
        "broker_embedded/storage/a.py:1 imports broker_embedded.server",
        "datasource/e.py:1 imports broker_embedded.server.d",
    ]


# What the data source may import of broker_embedded (a module, or a package and everything in
# it), each for a stated reason: the read and the write port, and the values, errors and codecs
# the layers share. Anything else (the storage's staged writes and lock, the client's producers,
# the coordinators' state) goes through a port.
DATASOURCE_MAY_IMPORT = {
    # the read port: FetchSource, its log-dir and wire implementations
    "broker_embedded.storage.fetch_source": "the read port",
    "broker_embedded.storage.log_dir_fetch_source": "the read port, a log dir",
    "broker_embedded.client.wire_fetch_source": "the read port, a cluster (and its descriptor)",
    # the write port: ProduceSink, its log-dir and wire implementations
    "broker_embedded.storage.produce_sink": "the write port",
    "broker_embedded.storage.log_dir_produce_sink": "the write port, a log dir",
    "broker_embedded.client.wire_produce_sink": "the write port, a cluster",
    # errors and values every layer shares
    "broker_embedded.errors": "Kafka's errors",
    "broker_embedded.common": "the values the layers share",
    "broker_embedded.storage.topic_partition": "TopicPartition, topic name rules",
    "broker_embedded.storage.fetch_data_info": "IsolationLevel",
    "broker_embedded.client.client_security": "the security settings the options are checked as",
    "broker_embedded.client.producer_record": "the producer record (moving to common)",
    # codecs between Arrow columns and record batches, and Kafka's partitioner
    "broker_embedded.record.kafka_schema": "the Spark schema of a Kafka record",
    "broker_embedded.record.columnar_decoder": "record batches to Arrow columns",
    "broker_embedded.record.columnar_encoder": "Arrow columns to record batches",
    "broker_embedded.record.records": "the batch walk of a fetched records buffer",
    "broker_embedded.record.kernel_primitives": "the compiled kernels' decorators",
    "broker_embedded.client.default_partitioner": "Kafka's murmur2 placement of a key",
    # Kafka's formats of __consumer_offsets (startingOffsets=group:, commitOffsetsToGroup)
    "broker_embedded.coordinator.coordinator_partition": "the group's __consumer_offsets partition",
    "broker_embedded.coordinator.group_metadata_record": "OffsetCommit keys and values",
    "broker_embedded.coordinator.group_metadata_loader": "the replay of a group's records",
    # not yet behind a port: creating __consumer_offsets in a log dir opens the broker facade;
    # the latest view's kernels share the cleaner's offset map
    "broker_embedded.broker": "the facade, to create __consumer_offsets in a log dir",
    "broker_embedded.coordinator.internal_topics": "__consumer_offsets' settings",
    "broker_embedded.cleaner.skimpy_offset_map": "the cleaner's key -> offset map kernels",
}


def broker_embedded_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every broker_embedded module ``path`` imports: ``from P import m``
    names ``P.m`` when ``P`` is a package (``from broker_embedded.storage import staged_write``),
    else ``P`` (``from broker_embedded.errors import KafkaLogError``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if ROOT.joinpath(*node.module.split(".")).is_dir():
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name.split(".")[0] == "broker_embedded"]


def datasource_import_violations(root: Path = ROOT) -> list[str]:
    """``file:line imports module`` for every broker_embedded module ``datasource/`` imports
    that ``DATASOURCE_MAY_IMPORT`` does not list (itself or a package holding it)."""
    bad = []
    for path in sorted((root / "datasource").rglob("*.py")):
        for line, name in broker_embedded_imports(path):
            if not any(name == m or name.startswith(m + ".") for m in DATASOURCE_MAY_IMPORT):
                bad.append(f"{path.relative_to(root).as_posix()}:{line} imports {name}")
    return bad


def test_data_source_imports_only_its_ports_and_shared_values() -> None:
    assert datasource_import_violations() == []


def test_checker_sees_a_data_source_import_past_the_ports(tmp_path: Path) -> None:
    (tmp_path / "datasource").mkdir()
    (tmp_path / "datasource" / "w.py").write_text(
        "from broker_embedded.errors import KafkaLogError\n"
        "from broker_embedded.storage import produce_sink, staged_write\n"
        "def f():\n"
        "    import broker_embedded.client.kafka_client\n"
        "    from broker_embedded.storage.log_dir_lock import LogDirLock\n"
        "    from broker_embedded.common.producer_record import ProducerRecord\n"
    )
    assert datasource_import_violations(tmp_path) == [
        "datasource/w.py:2 imports broker_embedded.storage.staged_write",
        "datasource/w.py:4 imports broker_embedded.client.kafka_client",
        "datasource/w.py:5 imports broker_embedded.storage.log_dir_lock",
    ]
