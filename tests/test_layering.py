"""The project's layers, declared once (``LAYERS``, bottom up), and the rule that holds them: every
import in every module of ``broker_embedded``, ``datasource``, ``spark_kafkalog``,
``pyspark_kafkalog`` and ``jobs`` goes to its own layer or a lower one.

Every import statement counts: at the top of a module, inside a function (a lazy import of a
module that pulls a heavy optional dependency, such as kio, pyarrow or pyspark, must still go
down), and under ``if TYPE_CHECKING`` (a type hint is a dependency on the other layer's
interface: where a lower layer needs to name something above it, it declares a small
``Protocol`` of what it uses, as replication/registered_broker.py and storage/log_manager.py's
``LogCleanerSettings`` do). Relative imports are resolved. Imports made by name at run time
(``importlib``) are not seen.

Besides the order: ``broker_embedded`` never imports pyspark; the data source reads the log only
through the fetch interface (storage/fetch_source.py and its implementations), never the
storage's segments, indexes or partition views; and of the project's packages only ``server/``
itself and the commands that start or administer it import ``server/``. And no module imports
itself back through others, counting every import but those under ``if TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_PACKAGES = ("broker_embedded", "datasource", "spark_kafkalog", "pyspark_kafkalog", "jobs")

# Bottom up: (layer, the modules and packages in it). A module may import its own layer and the
# ones before it. Each top-level module and subpackage of broker_embedded is named here
# (test_every_module_sits_in_a_declared_layer), so a new one must be placed before it is used.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Kafka's error codes and the exceptions that carry them; the package root (no imports)
    ("errors", ("broker_embedded", "broker_embedded.error_code", "broker_embedded.errors")),
    # threads on a schedule, latency histograms: what the log and the servers both run
    ("runtime", ("broker_embedded.scheduler", "broker_embedded.latency_histogram")),
    # the record format: varints, batches, codecs, the columnar kernels
    ("record", ("broker_embedded.record",)),
    # kio's wire schemas and Kafka's message codec for internal-topic and metadata records
    ("protocol", ("broker_embedded.protocol",)),
    # the log dir: segments, indexes, checkpoints, UnifiedLog, LogManager, the FetchSource
    ("storage", ("broker_embedded.storage",)),
    # values the layers above share: producer records, fetch and produce values, the purgatory
    ("common", ("broker_embedded.common",)),
    # log compaction over storage's logs (LogManager starts it through storage's port)
    ("cleaner", ("broker_embedded.cleaner",)),
    # the broker's settings (log defaults from storage's LogConfig)
    ("config", ("broker_embedded.broker_config",)),
    # partitions, ISR, HW, follower fetchers, produce/fetch/list offsets, delayed operations
    ("replica manager", ("broker_embedded.replica_manager",)),
    # the group and transaction coordinators and their internal topics' records
    ("coordinator", ("broker_embedded.coordinator",)),
    # the controller: topics, leader election, ISR changes; owns the transaction coordinator
    ("controller", ("broker_embedded.replication",)),
    # producers and the wire client; below the facade, which hands out the embedded producer
    ("client", ("broker_embedded.client",)),
    # the Broker facade and the embedded cluster
    ("facade", ("broker_embedded.broker", "broker_embedded.cluster")),
    # the Kafka wire-protocol server (`kafkalog serve`)
    ("server", ("broker_embedded.server",)),
    # the PySpark data source
    ("datasource", ("datasource",)),
    # what users run: the command line, the jobs, Spark's discovery shim
    ("command line", ("spark_kafkalog", "pyspark_kafkalog", "jobs")),
)


def layer_of(module: str) -> int | None:
    """Index in ``LAYERS`` of the longest declared name that is ``module`` or a package holding
    it (``broker_embedded`` itself holds nothing but its own ``__init__``); None: first-party
    code in no layer, or not first-party at all."""
    best: tuple[int, int] | None = None
    for index, (_, members) in enumerate(LAYERS):
        for m in members:
            holds = module == m or (module.startswith(m + ".") and m != "broker_embedded")
            if holds and (best is None or len(m) > best[1]):
                best = (index, len(m))
    return None if best is None else best[0]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, name) of every module imported anywhere in ``path`` (functions and ``if
    TYPE_CHECKING`` blocks included), and every ``from M import n`` as ``M`` and ``M.n`` (``n``
    may be a module); relative imports resolved against ``path``'s package."""
    package = module_name(root, path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def source_files(root: Path) -> list[Path]:
    return sorted(p for pkg in SOURCE_PACKAGES for p in (root / pkg).rglob("*.py"))


def order_violations(root: Path = ROOT) -> list[str]:
    """``file:line imports name (layer) above its own (layer)`` for every upward import, and
    ``file sits in no declared layer`` for a first-party module ``LAYERS`` does not place."""
    bad = []
    for path in source_files(root):
        file = path.relative_to(root).as_posix()
        own = layer_of(module_name(root, path))
        if own is None:
            bad.append(f"{file} sits in no declared layer")
            continue
        worst: dict[int, tuple[int, str]] = {}  # per statement, the highest layer it reaches
        for line, name in imported_names(path, root):
            target = layer_of(name)
            if target is not None and target > own and target > worst.get(line, (-1, ""))[0]:
                worst[line] = (target, name)
        bad += [
            f"{file}:{line} imports {name} ({LAYERS[target][0]}) above its layer ({LAYERS[own][0]})"
            for line, (target, name) in sorted(worst.items())
        ]
    return bad


def test_every_import_goes_down_the_declared_layers() -> None:
    assert order_violations() == []


def test_every_module_sits_in_a_declared_layer() -> None:
    named = {m for _, members in LAYERS for m in members}
    units = {
        f"broker_embedded.{p.name.removesuffix('.py')}"
        for p in (ROOT / "broker_embedded").iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()
    }
    assert sorted(units - named) == []
    assert sorted(named - units - {"broker_embedded", *SOURCE_PACKAGES}) == []


def test_checker_sees_an_upward_import(tmp_path: Path) -> None:
    files = {
        "broker_embedded/__init__.py": "",
        "broker_embedded/storage/__init__.py": "",
        "broker_embedded/storage/a.py": (
            "from typing import TYPE_CHECKING\n"
            "from broker_embedded.record.varint import decode_uvarint\n"  # down: fine
            "from broker_embedded.storage import b\n"  # own layer: fine
            "from broker_embedded import cleaner, errors\n"  # up: named once, the highest
            "if TYPE_CHECKING:\n"
            "    from broker_embedded.coordinator.group_store import GroupStore\n"
            "def f():\n"
            "    import broker_embedded.broker\n"
            "    from ..server import socket_server\n"
        ),
        "broker_embedded/replication/controller.py": "from broker_embedded.broker import Broker\n",
        "broker_embedded/shiny.py": "import os\n",
        "datasource/d.py": "import pyspark\nfrom spark_kafkalog import cli\n",
        "spark_kafkalog/e.py": "from datasource import d\nfrom broker_embedded.server import x\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert order_violations(tmp_path) == [
        "broker_embedded/replication/controller.py:1 imports broker_embedded.broker (facade) "
        "above its layer (controller)",
        "broker_embedded/shiny.py sits in no declared layer",
        "broker_embedded/storage/a.py:4 imports broker_embedded.cleaner (cleaner) above its "
        "layer (storage)",
        "broker_embedded/storage/a.py:6 imports broker_embedded.coordinator.group_store "
        "(coordinator) above its layer (storage)",
        "broker_embedded/storage/a.py:8 imports broker_embedded.broker (facade) above its layer "
        "(storage)",
        "broker_embedded/storage/a.py:9 imports broker_embedded.server (server) above its layer "
        "(storage)",
        "datasource/d.py:2 imports spark_kafkalog (command line) above its layer (datasource)",
    ]


def test_layer_of_places_modules_by_their_longest_declared_name() -> None:
    assert LAYERS[layer_of("broker_embedded.broker_config")][0] == "config"
    assert LAYERS[layer_of("broker_embedded.broker.Broker")][0] == "facade"
    assert LAYERS[layer_of("broker_embedded.storage.log_dir.LogDir")][0] == "storage"
    assert LAYERS[layer_of("broker_embedded")][0] == "errors"
    assert layer_of("broker_embedded.shiny") is None
    assert layer_of("pyspark.sql") is None


# -- pyspark stays out of broker_embedded ----------------------------------------------------------


def pyspark_violations(root: Path = ROOT) -> list[str]:
    paths = sorted((root / "broker_embedded").rglob("*.py"))
    return [
        f"{file}:{line} imports {module}"
        for file, line, module in imports_of(root, paths, ("pyspark", "pyspark_kafkalog"))
    ]


def test_broker_embedded_never_imports_pyspark() -> None:
    assert pyspark_violations() == []


# -- the data source reads through the FetchSource ---------------------------------------------

# storage modules behind the FetchSource: the data source plans, fetches and decodes only
STORAGE_INTERNALS = tuple(
    f"broker_embedded.storage.{name}"
    for name in (
        "partition_reader",
        "log_segment",
        "active_segment",
        "log_file_utils",
        "open_segments",
        "offset_index",
        "time_index",
        "log_dir",
    )
)


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


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
    assert imported_names(module, tmp_path) == [
        (1, "broker_embedded.storage"),
        (1, "broker_embedded.storage.log_dir"),
    ]


# -- who starts the server -----------------------------------------------------------------------

SERVER = "broker_embedded.server"
# who may import the network layer: itself, and the `kafkalog` command line (`kafkalog serve`)
SERVER_IMPORTERS = (
    "broker_embedded/server/",
    "spark_kafkalog/cli.py",
    "spark_kafkalog/serve_command.py",
    "spark_kafkalog/users_command.py",
    "spark_kafkalog/acls_command.py",
)  # `kafkalog users` and `kafkalog acls`: the server's users and ACLs


def imports_of(
    root: Path, paths: list[Path], prefixes: tuple[str, ...]
) -> list[tuple[str, int, str]]:
    """(file relative to ``root``, line, module) of every import of a module under ``prefixes``,
    one per import statement (``from broker_embedded import server`` counts as
    ``broker_embedded.server``, ``from broker_embedded.broker import Broker`` as
    ``broker_embedded.broker``)."""
    found: dict[tuple[str, int], str] = {}
    for path in paths:
        for line, module in imported_names(path, root):
            key = (path.relative_to(root).as_posix(), line)
            if under(module, prefixes) and len(module) < len(found.get(key, module + ".")):
                found[key] = module
    return sorted((file, line, module) for (file, line), module in found.items())


def server_violations(root: Path = ROOT) -> list[str]:
    return [
        f"{file}:{line} imports {module}"
        for file, line, module in imports_of(root, source_files(root), (SERVER,))
        if not file.startswith(SERVER_IMPORTERS)
    ]


def test_only_the_server_and_its_command_import_the_server() -> None:
    assert server_violations() == []


def test_checker_sees_a_server_import(tmp_path: Path) -> None:
    files = {
        "broker_embedded/storage/a.py": "from broker_embedded import server\n",
        "broker_embedded/server/c.py": "from broker_embedded.server import d\n",
        "datasource/e.py": "def f():\n    from broker_embedded.server.d import X\n",
        "spark_kafkalog/serve_command.py": "import broker_embedded.server.c\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert server_violations(tmp_path) == [
        "broker_embedded/storage/a.py:1 imports broker_embedded.server",
        "datasource/e.py:2 imports broker_embedded.server.d",
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
    "broker_embedded.storage.object_store_fetch_source": "the read port, a log dir on a store",
    "broker_embedded.storage.tiered_fetch_source": "the read port, a log dir and its store",
    "broker_embedded.storage.object_store": "a store's location and S3A settings (options)",
    # the write port: ProduceSink, its log-dir and wire implementations
    "broker_embedded.storage.produce_sink": "the write port",
    "broker_embedded.storage.log_dir_produce_sink": "the write port, a log dir",
    "broker_embedded.client.wire_produce_sink": "the write port, a cluster",
    # errors and values every layer shares
    "broker_embedded.errors": "Kafka's errors",
    "broker_embedded.common": "the values the layers share",
    "broker_embedded.storage.topic_partition": "TopicPartition, topic name rules",
    "broker_embedded.storage.fetch_data_info": "IsolationLevel",
    "broker_embedded.storage.log_config": "parse_boolean: a boolean option read as Kafka reads one",
    "broker_embedded.client.client_security": "the security settings the options are checked as",
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


# -- no import cycle among modules -----------------------------------------------------------------


def _run_time_imports(path: Path, root: Path) -> set[str]:
    """The first-party modules ``path`` imports when it runs (anywhere but under ``if
    TYPE_CHECKING``): ``from package import module`` is the module, ``from module import name``
    the module."""
    package = module_name(root, path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found: set[str] = set()
    nodes = list(ast.parse(path.read_text(), filename=str(path)).body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            nodes += node.orelse
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            found.update(f"{base}.{alias.name}" for alias in node.names)
            found.add(base)
        nodes += list(ast.iter_child_nodes(node))
    return found


def import_cycles(root: Path = ROOT) -> list[list[str]]:
    """The strongly connected groups of two or more first-party modules, by the imports they run
    (Tarjan's algorithm, iterative)."""
    modules = {module_name(root, p): p for p in source_files(root)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        names = _run_time_imports(path, root)
        # ``from package import module`` names the package too: the module is the dependency
        found = names & modules.keys()
        graph[name] = {n for n in found - {name} if not any(m.startswith(n + ".") for m in found)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = stack[stack.index(node) :]
                del stack[stack.index(node) :]
                if len(group) > 1:
                    cycles.append(sorted(group))
    return sorted(cycles)


def test_no_module_imports_itself_back() -> None:
    """A cycle through a function-local import works until someone moves the import; a lower
    module that must name an upper one does it under ``if TYPE_CHECKING`` (annotations only)
    or through a Protocol."""
    assert import_cycles() == []


def test_checker_sees_a_cycle_through_a_function_local_import(tmp_path: Path) -> None:
    files = {
        "broker_embedded/__init__.py": "",
        "broker_embedded/storage/__init__.py": "",
        "broker_embedded/storage/a.py": "from broker_embedded.storage.b import B\n",
        "broker_embedded/storage/b.py": "def f():\n    from broker_embedded.storage import a\n",
        "broker_embedded/storage/c.py": (
            "from typing import TYPE_CHECKING\n"
            "from broker_embedded.storage import a\n"
            "if TYPE_CHECKING:\n"
            "    from broker_embedded.storage.d import D\n"
        ),
        "broker_embedded/storage/d.py": "from broker_embedded.storage import c\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert import_cycles(tmp_path) == [["broker_embedded.storage.a", "broker_embedded.storage.b"]]
