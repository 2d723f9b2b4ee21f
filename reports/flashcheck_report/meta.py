"""The run's metadata as the page and the summary state it, gathered from the records themselves."""

from collections import Counter
from dataclasses import dataclass, field

from .records import number


@dataclass
class Metadata:
    commits: list = field(default_factory=list)
    devices: list = field(default_factory=list)
    first: str = ""
    last: str = ""
    scales: list = field(default_factory=list)
    seeds: list = field(default_factory=list)
    oracles: list = field(default_factory=list)  # "bf16 -> fp64" entries
    rho: list = field(default_factory=list)
    floor_u: list = field(default_factory=list)
    versions: list = field(default_factory=list)
    seconds: float = 0.0
    shards: str = ""  # "4 of 4 shards" or a warning naming the missing ones
    shards_complete: bool = True
    records_by_experiment: dict = field(default_factory=dict)


def _distinct(values):
    return sorted({str(v) for v in values if v is not None and v != ""})


def gather(records):
    everything = list(records.all())
    m = Metadata()
    m.commits = _distinct(r.get("commit") for r in everything)
    m.devices = _distinct(r.get("device") for r in everything)
    times = sorted(r["time"] for r in everything if r.get("time"))
    m.first, m.last = (times[0], times[-1]) if times else ("", "")
    m.scales = _distinct(r.get("scale") for r in records.runs)
    m.seeds = _distinct(r.get("seed") for r in everything if r.get("kind") in ("run", "experiment"))
    ladder = {}
    for r in records.runs:
        ladder.update(r.get("oracle_ladder") or {})
    if ladder:
        m.oracles = [f"{k} -> {v}" for k, v in sorted(ladder.items())]
    else:
        m.oracles = _distinct(f"{r.get('dtype')} -> {r['oracle']}" for r in everything if r.get("oracle") and r.get("dtype"))
    m.rho = _distinct(r.get("rho") for r in everything)
    m.floor_u = _distinct(r.get("floor_u") for r in everything)
    m.versions = _distinct(r.get("version") for r in everything)
    m.seconds = sum(number(r.get("seconds", 0)) for r in records.runs)
    m.records_by_experiment = {name: len(v) for name, v in sorted(records.experiments.items())}
    for name, count in Counter(r["experiment"] for r in records.errors).items():
        m.records_by_experiment[name] = m.records_by_experiment.get(name, 0) + count
    m.shards, m.shards_complete = _shards(records.runs)
    return m


def _shards(runs):
    """Whether the shards of a split run are all here: each run record names its shard "I/N"."""
    split = {}
    for r in runs:
        text = str(r.get("shard", "0/1"))
        index, count = (int(p) for p in text.split("/"))
        split.setdefault(count, set()).add(index)
    if not split:
        return "no run record (records from `flashcheck experiment` carry one)", True
    notes, complete = [], True
    for count, seen in sorted(split.items()):
        missing = sorted(set(range(count)) - seen)
        if count == 1:
            notes.append("one unsharded run" if len(seen) == 1 else f"{len(runs)} unsharded runs")
        elif missing:
            complete = False
            notes.append(f"{len(seen)} of {count} shards: shards {', '.join(f'{i}/{count}' for i in missing)} are MISSING")
        else:
            notes.append(f"all {count} shards")
    return "; ".join(notes), complete
