"""spark-submit entry point of the compaction job:

    spark-submit jobs/compact.py --config conf/compaction.toml [--dry-run] [--report FILE]

The logic is spark_kafkalog.compaction_job (run(spark, config, out)).
"""

import sys

from spark_kafkalog.compaction_job import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
