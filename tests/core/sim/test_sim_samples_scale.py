"""data/samples/sim_* regenerate byte for byte; scale mode writes valid, contiguous, decodable logs."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from coordinator_audit.core.records import OffsetCommitKey, decode, partition_for
from coordinator_audit.core.sim.scale import (
    ScaleConfig,
    generate,
    offset_commit_key,
    offset_commit_value,
    plan_groups,
)
from tools import make_samples

SAMPLES = Path(__file__).resolve().parents[3] / "data" / "samples"


def test_regenerating_the_samples_changes_nothing():
    assert make_samples.write_samples(SAMPLES, check=True) == []


def test_samples_have_the_kafka_source_schema():
    for name in make_samples.SAMPLE_SCENARIOS:
        table = pq.read_table(SAMPLES / f"sim_{name}.parquet")
        assert table.schema.equals(make_samples.KAFKA_SOURCE_SCHEMA)
        assert (SAMPLES / f"sim_{name}.truth.json").exists()


def test_fast_path_bytes_match_the_codec():
    key = offset_commit_key("my-group", "orders", 3)
    assert key.hex() == "0001" + "0008" + b"my-group".hex() + "0006" + b"orders".hex() + "00000003"
    value = offset_commit_value(1234, 1700000000000, 5)
    assert value.hex() == "0003" "00000000000004d2" "00000005" "0000" "0000018bcfe56800"
    rec = decode(key, value)
    assert rec.key == OffsetCommitKey("my-group", "orders", 3)
    assert (rec.value.offset, rec.value.leader_epoch, rec.value.commit_timestamp) == (1234, 5, 1700000000000)


def test_scale_mode_is_contiguous_decodable_and_deterministic():
    config = ScaleConfig(records=20_000, groups=12, seed=3, max_members=8)
    plans = plan_groups(config)
    parts = sorted({p.partition for p in plans})[:3]
    batches = list(generate(config, partitions=parts, batch_rows=1000))
    again = list(generate(config, partitions=parts, batch_rows=1000))
    assert [b.value for b in batches] == [b.value for b in again]
    rows = [(p, o, t, k, v) for b in batches
            for p, o, t, k, v in zip(b.partition, b.offset, b.timestamp_ms, b.key, b.value, strict=True)]
    for part in parts:
        mine = [r for r in rows if r[0] == part]
        assert [r[1] for r in mine] == list(range(len(mine)))
        assert [r[2] for r in mine] == sorted(r[2] for r in mine)
    groups = {p.group_id for p in plans if p.partition in parts}
    commits = 0
    for _, _, _, k, v in rows:
        rec = decode(k, v)
        assert rec.key.group in groups
        assert partition_for(rec.key.group) in parts
        commits += isinstance(rec.key, OffsetCommitKey)
    assert commits / len(rows) > 0.9
