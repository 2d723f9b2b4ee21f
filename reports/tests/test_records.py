"""Reading records: the schema is enforced and every problem names its file and line."""

import json
import math

import pytest

from conftest import header, write_jsonl
from flashcheck_report.records import RecordError, load, number


def test_fixture_records_load_by_kind(fixture_records):
    records = load([fixture_records])
    assert len(records.runs) == 1
    assert set(records.experiments) >= {"error-vs-seqlen", "error-vs-flatness", "error-vs-outliers", "rounding",
                                        "rescale", "memory-scaling", "gradcheck-matrix"}
    assert records.count() == sum(1 for _ in records.all())
    assert not records.errors


def test_non_finite_numbers_are_read_from_their_strings():
    assert number("inf") == math.inf and number("-inf") == -math.inf and math.isnan(number("nan"))
    assert number(3) == 3.0
    with pytest.raises(KeyError):
        number("1e3")  # numbers are JSON numbers; strings only for the non-finite values


@pytest.mark.parametrize("line, says", [
    ("not json", "not JSON"),
    ("[1, 2]", "JSON object"),
    (json.dumps({"schema": 2, "kind": "run"}), "schema 2"),
    (json.dumps({"schema": 1, "kind": "banana"}), "unknown kind"),
    (json.dumps({"schema": 1, "kind": "experiment", "experiment": "x"}), "without device, commit, time, verdict"),
])
def test_a_bad_line_is_named_with_its_file_and_line(tmp_path, line, says):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(header("rounding")) + "\n\n" + line + "\n")
    with pytest.raises(RecordError) as e:
        load([path])
    assert f"{path}:3" in str(e.value) and says in str(e.value)


def test_missing_paths_and_empty_directories_are_errors(tmp_path):
    with pytest.raises(RecordError, match="no such file"):
        load([tmp_path / "nope.jsonl"])
    with pytest.raises(RecordError, match="no \\*.jsonl records"):
        load([tmp_path])


def test_error_records_are_kept_apart(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [header("rounding", verdict="error", item="x", error="boom"), header("rounding")])
    records = load([tmp_path])
    assert len(records.errors) == 1 and len(records.experiments["rounding"]) == 1


def test_a_subject_error_is_kept_apart_though_its_verdict_is_fail(tmp_path):
    # A subject that raises on a case within its declared limits fails the case (verdict "fail") and
    # the record carries its message but no metrics: it must not reach the figures.
    write_jsonl(tmp_path / "a.jsonl", [header("error-vs-seqlen", verdict="fail", item="x", error="not implemented for 'Half'"),
                                       header("error-vs-seqlen")])
    records = load([tmp_path])
    assert len(records.errors) == 1 and len(records.experiments["error-vs-seqlen"]) == 1
