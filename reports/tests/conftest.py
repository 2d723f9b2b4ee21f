"""Shared fixtures: the committed test-scale records, and builders of synthetic records whose numbers
are known, so that a figure's fitted slope or exponent can be checked exactly."""

import json
import math
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the flashcheck_report package beside tests/

FIXTURE_RECORDS = HERE / "fixtures" / "test-scale"


@pytest.fixture
def fixture_records():
    assert FIXTURE_RECORDS.is_dir(), "fixture records missing: see fixtures/README.md"
    return FIXTURE_RECORDS


def header(experiment, **extra):
    r = {"schema": 1, "kind": "experiment", "experiment": experiment, "device": "cpu: test", "commit": "abc123",
         "time": "2026-11-22T00:00:00Z", "verdict": "pass", "seed": 1, "rho": 2.0, "floor_u": 1.0, "version": "0.1.0"}
    r.update(extra)
    return r


def error_record(experiment, subject, op, fmt, x_name, x, *, max_norm, rms_norm, ratio, baseline_max_norm):
    """A sweep record whose headline tensor has the given normwise errors (in units of u)."""
    u = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}[fmt]
    tensor = {"fwd": "O", "bwd": "dQ", "bwdbwd": "dQ'"}[op]

    def metrics(mx, rms):
        return {"max_abs": mx * u * 2.0, "reference_max_abs": 2.0, "rms": rms * u * 0.5, "reference_rms": 0.5,
                "mean_signed": 0.0, "max_rel": 0.0, "max_ulp": 0.0, "cosine": 1.0, "count": 10, "nonfinite_mismatch": 0}

    return header(experiment, subject=subject, op=op, dtype=fmt, policy=fmt, inputs="normal:1", mask="none",
                  shape={"B": 1, "Hq": 2, "Hkv": 2, "Nq": x, "Nk": x, "d": 64, "dv": 64}, oracle="fp64",
                  x={"name": x_name, "value": x},
                  tensors={tensor: {"format": fmt, "ratio": ratio, "baseline_usable": True,
                                    "subject": metrics(max_norm, rms_norm), "baseline": metrics(baseline_max_norm, rms_norm)}})


def as_written(x):
    """Non-finite numbers as the C++ writer spells them (JSON has none): "inf", "-inf", "nan"."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: as_written(v) for k, v in x.items()}
    if isinstance(x, list):
        return [as_written(v) for v in x]
    return x


def write_jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(as_written(r), allow_nan=False) + "\n")
    return path
