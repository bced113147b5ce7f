"""The input edge under fuzz: the job's command line (`coordinator_audit.jobs.audit.main`) on inputs spoiled at
random (garbage lines, keys that are not hex, wrong field types, truncated and empty files,
Parquet with wrong column types or null positions, undecidable encodings, a window with no rows).

Every run either succeeds with every input line accounted for (`records_in` = the non-blank lines,
each spoiled line in `quarantine` with its file and line number) or fails with one line naming what
and where; never a traceback. The random choices come from seeded generators: `FUZZ_SEEDS=1,2,3`
runs more of them (default: one seed)."""

from __future__ import annotations

import gzip
import json
import os
import random
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from coordinator_audit.jobs.audit import main

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "samples" / "real_broker_3_9_0.parquet"
SEEDS = [int(s) for s in os.environ.get("FUZZ_SEEDS", "0").split(",")]


def _good_lines(n: int) -> list[str]:
    rows = pq.read_table(SAMPLE).slice(0, n).to_pylist()
    return [json.dumps({"key": r["key"].hex(), "value": None if r["value"] is None else r["value"].hex(),
                        "topic": r["topic"], "partition": r["partition"], "offset": r["offset"],
                        "timestamp": int(r["timestamp"].timestamp() * 1000)}) for r in rows]


def _garbage(rng: random.Random, good: str) -> str:
    """One spoiled line: each kind is something a real dump can hold by mistake."""
    obj = json.loads(good)
    kind = rng.randrange(10)
    if kind == 0:
        return "".join(chr(rng.randrange(33, 0x2FF)) for _ in range(rng.randrange(1, 80)))
    if kind == 1:
        return good[: rng.randrange(1, len(good) - 1)]  # cut short
    if kind == 2:
        return rng.choice(["[1, 2, 3]", "42", '"a string"', "null", "true"])
    if kind == 3:
        obj[rng.choice(["partition", "offset"])] = rng.choice(["abc", 1.5, None, [], {"x": 1}])
    elif kind == 4:
        obj["timestamp"] = rng.choice(["yesterday", "2026-13-45", None, True])
    elif kind == 5:
        obj["key"] = "g" + obj["key"][1:]  # not hex
    elif kind == 6:
        obj["key"] = obj["key"] + "0"  # odd number of digits
    elif kind == 7:
        del obj[rng.choice(["partition", "offset", "timestamp"])]
    elif kind == 8:
        obj["key"] = rng.choice([12, True, ["00"]])
    else:
        obj["partition"] = 2**40  # out of int32's range
    return json.dumps(obj)


def _invoke(capfd, *args: str) -> tuple[int, str]:
    code = main([*args, "--master", "local[2]", "--shards", "2", "--no-summary"])
    out, err = capfd.readouterr()
    text = out + err
    assert "Traceback" not in text and "\tat " not in text, text[-4000:]
    return code, text


def _failed_with_one_line(code: int, text: str, *needles: str) -> None:
    assert code == 2, text[-2000:]
    lines = [ln for ln in text.splitlines() if ln.startswith("coordinator-audit run: ")]
    assert len(lines) == 1, text
    for needle in needles:
        assert needle in lines[0], lines[0]


def _runs_row(out: Path) -> dict:
    rows = DeltaTable(str(out / "runs")).to_pyarrow_table().to_pylist()
    assert len(rows) == 1
    r = rows[0]
    parts = ("records_replayed", "quarantined", "duplicates_dropped", "filtered_by_window", "filtered_by_group",
             "skipped_other_type")
    assert r["records_in"] == sum(r[p] for p in parts)
    return r


@pytest.mark.parametrize("seed", SEEDS)
def test_json_dumps_with_garbage_account_for_every_line(capfd, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    good = _good_lines(300)
    data = tmp_path / "dump"
    data.mkdir()

    lines = list(good)
    for _ in range(rng.randrange(8, 16)):
        lines.insert(rng.randrange(len(lines) + 1), _garbage(rng, rng.choice(good)))
    for _ in range(rng.randrange(1, 4)):  # blank lines are no records
        lines.insert(rng.randrange(len(lines)), rng.choice(["", "   ", "\t"]))
    (data / "a.jsonl").write_text("\n".join(lines) + "\n")
    good_set = set(good)
    spoiled_lines = {i + 1 for i, line in enumerate(lines) if line.strip() and line not in good_set}

    (data / "b.jsonl").write_text("")  # empty
    cut = good[:50]
    (data / "c.jsonl").write_text("\n".join(cut) + "\n" + cut[0][: rng.randrange(5, 60)])  # ends mid-line
    packed = gzip.compress(("\n".join(good[50:200]) + "\n").encode())
    truncated = packed[: rng.randrange(len(packed) // 4, 3 * len(packed) // 4)]
    (data / "d.jsonl.gz").write_bytes(truncated)
    readable = zlib.decompressobj(wbits=31).decompress(truncated)
    gz_lines = readable.count(b"\n")

    out = tmp_path / "out"
    code, text = _invoke(capfd, "--input", str(data), "--output", str(out))
    assert code == 0, text[-3000:]
    r = _runs_row(out)
    non_blank = sum(1 for line in lines if line.strip())
    assert r["records_in"] == non_blank + 51 + gz_lines + 1  # + the unreadable rest of the .gz
    quarantine = DeltaTable(str(out / "quarantine")).to_pyarrow_table().to_pylist()
    rejected = {(Path(q["input_file"]).name, q["input_line"]) for q in quarantine if q["input_file"]}
    assert {("a.jsonl", n) for n in spoiled_lines} <= rejected
    assert ("c.jsonl", 51) in rejected and ("d.jsonl.gz", gz_lines + 1) in rejected
    assert all(q["error"] for q in quarantine)
    a_rows = [q for q in quarantine if q["input_file"] and q["input_file"].endswith("a.jsonl")]
    assert all(q["input_text"] == lines[q["input_line"] - 1] for q in a_rows if q["error"].startswith("the line"))
    assert r["quarantined"] >= len(spoiled_lines) + 2


def test_a_window_with_no_rows_and_null_positions(capfd, tmp_path: Path) -> None:
    dump = tmp_path / "dump.jsonl"
    dump.write_text("\n".join(_good_lines(100)) + "\n")
    code, text = _invoke(capfd, "--input", str(dump), "--output", str(tmp_path / "w"), "--since", "2030-01-01")
    assert code == 0, text[-3000:]
    r = _runs_row(tmp_path / "w")
    assert r["records_in"] == r["filtered_by_window"] == 100

    t = pq.read_table(SAMPLE).slice(0, 200)
    offsets = t.column("offset").to_pylist()
    offsets[3] = offsets[150] = None
    pq.write_table(t.set_column(t.schema.get_field_index("offset"), "offset", pa.array(offsets, pa.int64())),
                   tmp_path / "nulls.parquet")
    code, text = _invoke(capfd, "--input", str(tmp_path / "nulls.parquet"), "--output", str(tmp_path / "n"))
    assert code == 0, text[-3000:]
    r = _runs_row(tmp_path / "n")
    assert r["records_in"] == 200 and r["quarantined"] >= 2
    errors = [q["error"] for q in DeltaTable(str(tmp_path / "n" / "quarantine")).to_pyarrow_table().to_pylist()]
    assert sum("the record has no offset" in e for e in errors) == 2


@pytest.mark.parametrize("seed", SEEDS)
def test_inputs_that_cannot_be_read_fail_with_one_line(capfd, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    table = pq.read_table(SAMPLE).slice(0, 50)

    wrong = table.set_column(0, "key", pa.array([k.hex() for k in table.column("key").to_pylist()]))
    pq.write_table(wrong, tmp_path / "string_key.parquet")
    _failed_with_one_line(*_invoke(capfd, "--input", str(tmp_path / "string_key.parquet"), "--output",
                                   str(tmp_path / "o1")), "column key is string")

    whole = (SAMPLE).read_bytes()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "part.parquet").write_bytes(whole[: rng.randrange(100, len(whole) - 100)])
    _failed_with_one_line(*_invoke(capfd, "--input", str(tmp_path / "cut"), "--output", str(tmp_path / "o2")),
                          "part.parquet", "not a readable Parquet file")

    letters = "ghijklmnopqrstuvwxyz!@#"
    noise = [json.dumps({"key": "".join(rng.choice(letters) for _ in range(rng.randrange(3, 30))), "value": None,
                         "partition": 0, "offset": i, "timestamp": 0}) for i in range(40)]
    (tmp_path / "noise.jsonl").write_text("\n".join(noise) + "\n")
    _failed_with_one_line(*_invoke(capfd, "--input", str(tmp_path / "noise.jsonl"), "--output",
                                   str(tmp_path / "o3")), "cannot tell how keys and values are encoded")

    (tmp_path / "doc.json").write_text(json.dumps({"groups": [1, 2]}, indent=2))
    _failed_with_one_line(*_invoke(capfd, "--input", str(tmp_path / "doc.json"), "--output", str(tmp_path / "o4")),
                          "no JSON line with 'partition' and 'offset'")

    _failed_with_one_line(*_invoke(capfd, "--input", str(tmp_path / "absent"), "--output", str(tmp_path / "o5")),
                          "no such file or directory", "--input-table")


def test_malformed_records_are_quarantined_never_repeats_or_gaps(capfd, tmp_path: Path) -> None:
    """Offset commits whose values are cut to 8 bytes (inside stretches of their groups' commits),
    JSON lines whose keys are not hex and Parquet records without a timestamp: each one quarantined
    with its reason, none counted as a repeat, and none an offset never read (no `history_gap`, no
    missing offsets)."""
    table = pq.read_table(SAMPLE)
    rows = table.to_pylist()
    commits = [i for i, r in enumerate(rows) if r["key"][:2] in (b"\x00\x00", b"\x00\x01") and r["value"]]
    cut = commits[100:600:100]
    for i in cut:
        rows[i]["value"] = rows[i]["value"][:8]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), tmp_path / "cut.parquet")

    lines = _good_lines(table.num_rows)
    spoiled = (200, 400, 600)
    for i in spoiled:
        obj = json.loads(lines[i])
        obj["key"] = "g" + obj["key"][1:]
        lines[i] = json.dumps(obj)
    (tmp_path / "dump.jsonl").write_text("\n".join(lines) + "\n")

    untimed = (300, 500, 700)
    times = table.column("timestamp").to_pylist()
    for i in untimed:
        times[i] = None
    pq.write_table(table.set_column(table.schema.get_field_index("timestamp"), "timestamp",
                                    pa.array(times, table.schema.field("timestamp").type)), tmp_path / "untimed.parquet")

    for name, positions, reason in (("cut.parquet", cut, "offset"), ("dump.jsonl", spoiled, "key is not valid hex"),
                                    ("untimed.parquet", untimed, "no timestamp")):
        out = tmp_path / f"out-{name}"
        code, text = _invoke(capfd, "--input", str(tmp_path / name), "--output", str(out))
        assert code == 0, text[-3000:]
        r = _runs_row(out)
        assert (r["records_in"], r["quarantined"], r["duplicates_dropped"]) == (table.num_rows, len(positions), 0)
        assert not r["missing_offsets"] and "never read" not in (r["note"] or ""), r["note"]
        quarantine = DeltaTable(str(out / "quarantine")).to_pyarrow_table().to_pylist()
        assert sorted((q["partition"], q["offset"]) for q in quarantine) == sorted(
            (rows[i]["partition"], rows[i]["offset"]) for i in positions)
        assert all(reason in q["error"] for q in quarantine), [q["error"] for q in quarantine]
        causes = DeltaTable(str(out / "rebalance_causes")).to_pyarrow_table().to_pylist()
        assert not [c for c in causes if c["cause"] == "history_gap"]


def test_rejected_lines_outside_the_window_are_counted_outside_it(capfd, tmp_path: Path) -> None:
    """A window over a JSON dump with lines whose keys are not hex: those the window holds are
    quarantined, the others are counted outside the window like the records around them (the run of
    their own window quarantines them), and none is an offset never read."""
    lines = _good_lines(pq.read_metadata(SAMPLE).num_rows)
    for i in (200, 400, 600, 800):
        obj = json.loads(lines[i])
        obj["key"] = "g" + obj["key"][1:]
        lines[i] = json.dumps(obj)
    (tmp_path / "dump.jsonl").write_text("\n".join(lines) + "\n")
    times = sorted(json.loads(line)["timestamp"] for line in lines)
    since = times[len(times) // 2] // 1000 * 1000  # (a window bound is whole seconds)
    inside = [i for i in (200, 400, 600, 800) if json.loads(lines[i])["timestamp"] >= since]
    assert 0 < len(inside) < 4
    out = tmp_path / "out"
    code, text = _invoke(capfd, "--input", str(tmp_path / "dump.jsonl"), "--output", str(out), "--since",
                         datetime.fromtimestamp(since / 1000, UTC).isoformat())
    assert code == 0, text[-3000:]
    r = _runs_row(out)
    assert (r["records_in"], r["quarantined"]) == (len(lines), len(inside))
    assert r["filtered_by_window"] == sum(1 for t in times if t < since)
    assert "never read" not in (r["note"] or ""), r["note"]
    quarantine = DeltaTable(str(out / "quarantine")).to_pyarrow_table().to_pylist()
    assert sorted(q["input_line"] for q in quarantine) == [i + 1 for i in inside]
