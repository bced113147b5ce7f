"""jobs.decode_summary, the interim run command: the real sample, quarantined records, bad inputs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator_core.records import CoordinatorRecord, GroupMetadataKey, MemberMetadata, encode
from coordinator_core.records import GroupMetadataValue as GMV
from jobs.decode_summary import main, summarize

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "samples" / "real_broker_3_9_0.parquet"


def test_real_sample_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "1138 records, 1138 decoded, 0 quarantined" in out
    assert "OffsetCommit                                 1116          0       4  v1: 1116 / v3: 1116" in out
    assert "GroupMetadata                                  22          0       4  v2: 22 / v3: 22" in out
    assert "member subscriptions v0: 11, v3: 28; assignments v0: 11, v3: 28" in out


def _write(path: Path, rows: dict[str, list[object]]) -> Path:
    pq.write_table(pa.table(rows), path)
    return path


def test_quarantine_names_partition_offset_and_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good_key, good_value = encode(CoordinatorRecord.of(GroupMetadataKey("g"), GMV(
        "consumer", 1, "range", "m", 5, (MemberMetadata("m", None, "c", "/h", 1, 1, b"", b""),))))
    path = _write(tmp_path / "log.parquet", {
        "key": [good_key, b"\x00\x01\x00\x05ab", good_key, bytes.fromhex("00000001"), b"\x00\x12x"],
        "value": [good_value, b"\x00\x03", None, bytes.fromhex("000000000007"), None],
        "partition": pa.array([3, 3, 3, 3, 3], pa.int32()),
        "offset": pa.array([10, 11, 12, 13, 14], pa.int64()),
        "is_control": [False, False, False, True, False],
    })
    summary = summarize(path)
    assert summary.quarantined == [(3, 11, "partition 3 offset 11, OffsetCommitKey.group, byte 4: "
                                           "string of length 5 needs 5 byte(s) but only 2 remain")]
    assert summary.by_type["GroupMetadata"].tombstones == 1
    assert summary.by_type["Control(COMMIT)"].records == 1
    assert summary.by_type["Unknown(18)"].records == 1
    # the member's empty subscription is not a valid ConsumerProtocolSubscription
    assert [(p, o) for p, o, _ in summary.embedded_errors] == [(3, 10)]
    assert main([str(path), "--show", "0"]) == 0
    out = capsys.readouterr().out
    assert "quarantined records (1):" in out and "... and 1 more" in out


def test_missing_file_and_wrong_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "absent.parquet")]) == 2
    assert "absent.parquet: no such file" in capsys.readouterr().err
    wrong = _write(tmp_path / "wrong.parquet", {"key": ["text"], "offset": [1]})
    assert main([str(wrong)]) == 2
    err = capsys.readouterr().err
    assert "column 'key' is string, expected binary" in err and "missing column 'value'" in err
    assert "missing column 'partition'" in err
