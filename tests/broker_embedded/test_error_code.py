"""The one table of Kafka error codes (broker_embedded/error_code.py): equal to kio's ErrorCode,
every code mapped to a domain exception, and no other module writing a code as a number.

The last is checked statically over every module's syntax tree (as tests/test_layering.py checks
imports), so a hand-written code fails here even on a code path no other test runs.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import broker_embedded
from broker_embedded.error_code import (
    COORDINATOR_MOVED,
    LEADER_MOVED,
    ErrorCode,
    kafka_message,
)
from broker_embedded.errors import (
    API_ERRORS,
    InvalidRequestError,
    KafkaApiError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
    SegmentTruncatedError,
    ThrottlingQuotaExceededError,
    api_error,
)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker_embedded", "datasource", "spark_kafkalog", "pyspark_kafkalog", "jobs")
TABLE = ROOT / "broker_embedded" / "error_code.py"
NAMES = frozenset(e.kafka_name for e in ErrorCode) - {"NONE"}  # NONE: compression's too


def test_the_table_is_kios_error_code() -> None:
    kio_errors = pytest.importorskip("kio.schema.errors")  # kio: Python 3.11+
    ours = [(e.value, e.name, e.retriable) for e in ErrorCode]
    kios = [(e.value, e.name, e.retriable) for e in kio_errors.ErrorCode]
    assert [row for row in kios if row not in ours] == []  # a kio upgrade: add these rows
    assert ours == kios


def test_codes_names_and_messages_of_a_few_rows() -> None:
    assert ErrorCode(42) is ErrorCode.invalid_request
    assert ErrorCode.invalid_request.kafka_name == "INVALID_REQUEST"
    assert ErrorCode.invalid_request.retriable is False
    assert ErrorCode.not_leader_or_follower.retriable is True
    assert ErrorCode.coordinator_load_in_progress.message == (
        "The coordinator is loading and hence can't process requests."
    )
    assert ErrorCode.none.message is None
    assert all(e.message for e in ErrorCode if e is not ErrorCode.none)


def test_kafka_message_of_an_unknown_code_is_the_unexpected_errors() -> None:
    unexpected = "The server experienced an unexpected error when processing the request."
    assert kafka_message(999) == unexpected
    assert kafka_message(0) == unexpected
    assert kafka_message(7) == "The request timed out."


def test_the_retry_sets_hold_retriable_errors_only() -> None:
    assert all(e.retriable for e in LEADER_MOVED | COORDINATOR_MOVED)


@pytest.mark.parametrize("code", [e for e in ErrorCode if e is not ErrorCode.none])
def test_api_error_covers_every_code(code: ErrorCode) -> None:
    error = api_error(code, "Fetch of topic 't' partition 0")
    assert isinstance(error, API_ERRORS.get(code, KafkaApiError))
    assert (error.code, error.name) == (code, code.kafka_name)
    assert str(error) == f"Fetch of topic 't' partition 0: {code.kafka_name}"


def test_api_error_picks_the_class_that_introduces_a_code() -> None:
    assert type(api_error(1, "m")) is OffsetOutOfRangeError  # not SegmentTruncatedError
    assert issubclass(SegmentTruncatedError, OffsetOutOfRangeError)
    assert type(api_error(5, "m")) is LeaderNotAvailableError
    assert type(api_error(42, "m")) is InvalidRequestError
    assert api_error(89, "m").throttle_time_ms == 0
    assert isinstance(api_error(89, "m"), ThrottlingQuotaExceededError)


def test_api_error_of_a_code_the_table_lacks() -> None:
    error = api_error(999, "Produce to topic 't'")
    assert type(error) is KafkaApiError
    assert (error.code, error.name, str(error)) == (
        999,
        "UNKNOWN_SERVER_ERROR",
        "Produce to topic 't' (error code 999)",
    )


def test_a_domain_exception_without_a_message_carries_kafkas() -> None:
    assert str(LeaderNotAvailableError()) == ErrorCode.leader_not_available.message


def _every_module() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(broker_embedded.__path__, "broker_embedded."):
        names.append(info.name)
    return names


def test_every_domain_exception_names_a_code_of_the_table() -> None:
    pytest.importorskip("kio")  # the server's and client's modules need it
    for name in _every_module():
        importlib.import_module(name)
    pending, bad = [KafkaApiError], []
    while pending:
        for cls in pending.pop().__subclasses__():
            pending.append(cls)
            if not isinstance(cls.code, ErrorCode):
                bad.append(f"{cls.__module__}.{cls.__qualname__}.code = {cls.code!r}")
    assert bad == []


# -- no Kafka error code written as a number outside the table ------------------------------------


def _is_number(node: ast.AST | None) -> bool:
    """An int literal or a negated one."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _is_number(node.operand)
    return False


def _is_numbers(node: ast.AST | None) -> bool:
    """A set/tuple/list/frozenset() of int literals."""
    if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
        return bool(node.elts) and all(_is_number(e) for e in node.elts)
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("frozenset", "set"):
        return len(node.args) == 1 and _is_numbers(node.args[0])
    return False


def _names_a_code(name: str) -> bool:
    """A name that holds a Kafka error code: ``code``, ``error_code``, a Kafka error's name
    (``UNKNOWN_TOPIC_ID``), ``NO_ERROR``."""
    bare = name.lstrip("_").upper()
    return bare in NAMES or bare in ("CODE", "NO_ERROR") or bare.endswith("ERROR_CODE")


def _names_codes(name: str) -> bool:
    """A name that holds a set of them: ``RETRIABLE``, ``_NO_LOG_START_ERRORS``, ..."""
    bare = name.lstrip("_").upper()
    return _names_a_code(name) or bare.endswith(("_CODES", "ERRORS", "RETRIABLE"))


def _assigned(node: ast.Assign | ast.AnnAssign) -> list[tuple[str, ast.AST | None]]:
    """(target name, value) pairs, tuple assignments paired element by element."""
    pairs = []
    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
        value = node.value
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
            if len(target.elts) == len(value.elts):
                pairs += [
                    (n, v) for t, v in zip(target.elts, value.elts, strict=True) for n in _names(t)
                ]
                continue
        pairs += [(n, value) for n in _names(target)]
    return pairs


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Tuple):
        return [n for e in node.elts for n in _names(e)]
    return []


def _codes_in(name: str, value: ast.AST | None) -> bool:
    return (_is_number(value) and _names_a_code(name)) or (
        _is_numbers(value) and _names_codes(name)
    )


def _numbers_used_as_codes(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            if any(_codes_in(name, value) for name, value in _assigned(node)):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Compare):
            sides = [_bare(s) for s in (node.left, *node.comparators)]
            names = [n for s in sides for n in _names(s)]
            if any(_codes_in(n, s) for n in names for s in sides):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.keyword) and node.arg and _codes_in(node.arg, node.value):
            found.append((node.lineno, f"{node.arg}={ast.unparse(node.value)}"))
        elif isinstance(node, ast.Call) and _callee(node) in ("api_error", "ErrorCode"):
            if node.args and _is_number(node.args[0]):
                found.append((node.lineno, ast.unparse(node)))
    return found


def _bare(node: ast.AST) -> ast.AST:
    """``int(x.error_code)`` -> ``x.error_code``."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "int" and node.args:
        return node.args[0]
    return node


def _callee(node: ast.Call) -> str | None:
    return getattr(node.func, "id", None) or getattr(node.func, "attr", None)


def test_no_module_but_the_table_writes_an_error_code_as_a_number() -> None:
    bad = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == TABLE:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for line, text in _numbers_used_as_codes(tree):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert bad == []


@pytest.mark.parametrize(
    "source",
    [
        "class E(KafkaApiError):\n    code = 42\n",
        "class E(KafkaApiError):\n    code, name = 14, 'COORDINATOR_LOAD_IN_PROGRESS'\n",
        "RETRIABLE = frozenset({5, 6})\n",
        "_NO_LOG_START_ERRORS = frozenset({2, 3})\n",
        "UNKNOWN_TOPIC_ID = 100\n",
        "if response.error_code != 0:\n    pass\n",
        "if int(code) == 35:\n    pass\n",
        "if e.code in (5, 3):\n    pass\n",
        "x = make(t, topic_config_error_code=0)\n",
        "raise api_error(42, 'm')\n",
    ],
)
def test_the_checker_sees_a_hand_written_code(source: str) -> None:
    assert len(_numbers_used_as_codes(ast.parse(source))) == 1


def test_the_checker_leaves_other_numbers_alone() -> None:
    source = (
        "MAX_RECORD_ERRORS = 1000\nif count != 0:\n    pass\ncode = ErrorCode.none\n"
        "exit_code = 0\nNONE = 0\n"
    )
    assert _numbers_used_as_codes(ast.parse(source)) == []
