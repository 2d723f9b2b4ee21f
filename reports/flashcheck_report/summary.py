"""summary.md: the metadata, each figure's findings and the table of numbers behind it, in Markdown
(readable in a terminal, a pull request or a notebook)."""

import math
from pathlib import Path

from .meta import gather


def _cell(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        return f"{v:.3g}"
    if v is None:
        return "n/a"
    return str(v).replace("|", "\\|")


def _table(rows):
    if not rows:
        return []
    keys = list(rows[0].keys())
    for r in rows[1:]:
        keys += [k for k in r if k not in keys]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(r.get(k)) for k in keys) + " |" for r in rows]
    return lines


def write_summary(records, figures, out_dir):
    m = gather(records)
    lines = ["# flashcheck report", "",
             f"- commit: {', '.join(m.commits) or 'unknown'}",
             f"- device: {'; '.join(m.devices) or 'unknown'}",
             f"- date (UTC): {m.first} .. {m.last}",
             f"- scale: {', '.join(m.scales) or 'unknown'}; seed: {', '.join(m.seeds) or 'unknown'}",
             f"- oracle precision: {'; '.join(m.oracles) or 'unknown'}",
             f"- verdict: rho {', '.join(m.rho) or 'n/a'}, error floor {', '.join(m.floor_u) or 'n/a'} u",
             f"- shards: {m.shards}",
             f"- records: {records.count()} ({len(records.errors)} errors)", ""]
    for f in figures:
        lines += [f"## {f.title}", "", f"![{f.name}]({f.path})", "", f.caption, ""]
        lines += [f"- {x}" for x in f.findings]
        lines += [""] + _table(f.table) + [""]
    if records.errors:
        lines += ["## Errors", ""] + [f"- {r['experiment']}: {r.get('item', '')}: {r.get('error', '')}" for r in records.errors] + [""]
    path = Path(out_dir) / "summary.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
