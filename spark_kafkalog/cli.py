"""The ``kafkalog`` command line.

Subcommands:
  dump PATH... [--records] [--json] [--summary] [--verify]
                                                 print and verify segments (like kafka-dump-log)
  demo [--dir DIR]                               the main job on an embedded default log dir

Exit status: 0 success, 1 a reported error (corruption, bad path), 2 bad usage. Errors go to
stderr as one line naming the file, byte position and offset.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from broker_embedded.errors import KafkaLogError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kafkalog", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    dump = sub.add_parser("dump", help="print and verify Kafka log segments")
    dump.add_argument("paths", nargs="+", type=Path, help="segment file, partition dir or log dir")
    dump.add_argument("--records", action="store_true", help="one line per record too")
    dump.add_argument("--json", action="store_true", help="one JSON object a line")
    dump.add_argument("--summary", action="store_true", help="only the summary line per file")
    dump.add_argument(
        "--verify",
        action="store_true",
        help="check every CRC and index entry; exit 1 on the first bad one",
    )

    demo = sub.add_parser("demo", help="write a sample log dir, then verify and summarise it")
    demo.add_argument("--dir", type=Path, default=Path("demo-logdir"), help="recreated each run")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "dump":
            from spark_kafkalog.dump_log import dump

            return dump(
                args.paths,
                sys.stdout,
                records=args.records,
                as_json=args.json,
                verify=args.verify,
                summary_only=args.summary,
            )
        if args.command == "demo":
            from spark_kafkalog.demo import run

            return run(args.dir, sys.stdout)
    except KafkaLogError as e:
        sys.stdout.flush()
        print(f"kafkalog {args.command}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
