"""python -m flashcheck_report RECORDS... --out DIR: draw a report from JSON Lines files or directories."""

import argparse
import sys

from .records import RecordError
from .render import render


def main(argv=None):
    parser = argparse.ArgumentParser(prog="flashcheck_report", description=__doc__)
    parser.add_argument("records", nargs="+", help="JSON Lines files, or directories searched for *.jsonl (shards concatenate)")
    parser.add_argument("--out", required=True, help="directory for index.html, summary.md and figures/")
    args = parser.parse_args(argv)
    try:
        result = render(args.records, args.out)
    except RecordError as e:
        print(f"flashcheck_report: error: {e}", file=sys.stderr)
        return 2
    print(f"flashcheck_report: {len(result.figures)} figures, {result.records} records -> {result.index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
