"""spark-submit entry point of the compaction job:

    spark-submit jobs/compact.py --config conf/compaction.toml [--dry-run] [--report FILE]
                                 [--log-level L] [--log-format text|json]

The logic is spark_kafkalog.compaction_job (``run(spark, config, out)``); the report and its exit
status spark_kafkalog.compaction_report.
"""

from __future__ import annotations

import argparse
import sys

from spark_kafkalog import cli_logging, compaction_report
from spark_kafkalog.compaction_config import CompactionConfig
from spark_kafkalog.compaction_job import JobReport, run
from spark_kafkalog.kernel_cache import ensure_compiled


def main(argv: list[str] | None = None) -> int:
    """``spark-submit jobs/compact.py --config FILE [--dry-run] [--report FILE]
    [--log-level L] [--log-format text|json]``."""
    parser = argparse.ArgumentParser(prog="jobs/compact.py", description="kafkalog compaction")
    compaction_report.add_arguments(parser)
    cli_logging.add_arguments(parser)
    args = parser.parse_args(argv)
    cli_logging.configure(args.log_level or "warning", args.log_format or "text")

    def on_spark(config: CompactionConfig) -> JobReport:
        from pyspark.sql import SparkSession

        ensure_compiled()  # before Spark starts its workers: they load the kernels, none compiles
        spark = SparkSession.builder.appName("kafkalog-compaction").getOrCreate()
        try:
            return run(spark, config, sys.stdout, dry_run=args.dry_run)
        finally:
            spark.stop()

    return compaction_report.execute(args.config, args.report, on_spark)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
