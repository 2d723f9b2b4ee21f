"""render(paths, out): records -> figures/, index.html and summary.md under `out`."""

from dataclasses import dataclass, field
from pathlib import Path

from .figures import DRAWERS
from .page import write_index
from .records import load
from .summary import write_summary


@dataclass
class Result:
    figures: list = field(default_factory=list)
    records: int = 0
    index: str = ""
    summary: str = ""
    skipped: list = field(default_factory=list)  # experiments in the records without a drawer


def render(paths, out):
    records = load(paths)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = Result(records=records.count())
    for name, draw in DRAWERS.items():
        if records.experiments.get(name):
            result.figures.extend(draw(records.experiments[name], out_dir))
    result.skipped = sorted(set(records.experiments) - set(DRAWERS))
    result.index = str(write_index(records, result.figures, out_dir, result.skipped))
    result.summary = str(write_summary(records, result.figures, out_dir))
    return result
