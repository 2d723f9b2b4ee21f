"""Reading JSON Lines records: every *.jsonl under the given paths, checked against the schema."""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_VERSION = 1
# Fields every record of these kinds carries (DESIGN.md); the rest depend on the experiment.
REQUIRED = {
    "experiment": ("schema", "kind", "experiment", "device", "commit", "time", "verdict"),
    "run": ("schema", "kind", "device", "commit", "time", "scale", "seed", "experiments"),
    "check": ("schema", "kind", "subject", "op", "policy", "verdict", "device", "commit", "time"),
}


class RecordError(ValueError):
    """A record file that cannot be read: named with its line."""


def number(value):
    """A record's number: JSON numbers, or the strings "inf", "-inf", "nan" the writer uses for
    non-finite values (JSON has none)."""
    if isinstance(value, str):
        return {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[value]
    return float(value)


@dataclass
class Records:
    """All records of a report, by kind."""

    experiments: dict = field(default_factory=dict)  # experiment name -> list of records (errors excluded)
    errors: list = field(default_factory=list)  # records with verdict "error", or a subject's error
    runs: list = field(default_factory=list)  # "run" records (one per run or shard)
    checks: list = field(default_factory=list)  # `flashcheck check --json` records
    files: list = field(default_factory=list)

    def count(self):
        return sum(len(v) for v in self.experiments.values()) + len(self.errors) + len(self.runs) + len(self.checks)

    def all(self):
        for records in self.experiments.values():
            yield from records
        yield from self.errors
        yield from self.runs
        yield from self.checks


def files_of(paths):
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(sorted(p.rglob("*.jsonl")))
        elif p.is_file():
            found.append(p)
        else:
            raise RecordError(f"{p}: no such file or directory")
    if not found:
        raise RecordError(f"no *.jsonl records under {', '.join(map(str, paths))}")
    return found


def load(paths):
    records = Records()
    for path in files_of(paths):
        records.files.append(str(path))
        with open(path, encoding="utf-8") as f:
            for line_number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{line_number}"
                try:
                    r = json.loads(line)
                except json.JSONDecodeError as e:
                    raise RecordError(f"{where}: not JSON ({e.msg})") from None
                if not isinstance(r, dict):
                    raise RecordError(f"{where}: a record must be a JSON object")
                if r.get("schema") != SCHEMA_VERSION:
                    raise RecordError(f"{where}: schema {r.get('schema')!r}, this reader knows {SCHEMA_VERSION}")
                kind = r.get("kind")
                if kind not in REQUIRED:
                    raise RecordError(f"{where}: unknown kind {kind!r}")
                missing = [k for k in REQUIRED[kind] if k not in r]
                if missing:
                    raise RecordError(f"{where}: {kind} record without {', '.join(missing)}")
                if kind == "run":
                    records.runs.append(r)
                elif kind == "check":
                    records.checks.append(r)
                elif r["verdict"] == "error" or "error" in r:
                    # a subject's error (verdict "fail": it failed the case) has no metrics to draw
                    records.errors.append(r)
                else:
                    records.experiments.setdefault(r["experiment"], []).append(r)
    return records
