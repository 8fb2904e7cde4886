"""The packages depend one way: spark_kafkalog -> datasource -> broker_embedded; and the data
source reads the log only through the fetch interface (broker_embedded/storage/fetch_source.py
and its implementations), never the storage's segments, indexes or partition views directly.

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
            if any(module == m or module.startswith(m + ".") for m in STORAGE_INTERNALS):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return bad


def test_data_source_reads_only_through_the_fetch_source() -> None:
    assert storage_violations("datasource") == []


def test_checker_sees_a_storage_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from broker_embedded.storage import log_dir\n")
    assert imported_names(module) == [(1, "broker_embedded.storage"),
                                      (1, "broker_embedded.storage.log_dir")]  # fmt: skip
