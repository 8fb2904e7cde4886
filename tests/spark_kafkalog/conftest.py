"""The demo tests share the data source tests' SparkSession (tests/datasource/conftest.py)."""

from tests.datasource.conftest import spark  # noqa: F401 (a pytest fixture)
