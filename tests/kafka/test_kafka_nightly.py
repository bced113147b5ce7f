"""A nightly chain read through Kafka: a broker's `__consumer_offsets` loaded with the first half
of a log, audited up to the cut, loaded with the rest, audited from the cut on (the run resumes
after the first run's end offsets, from its saved states), equals one audit of the whole log read
through Kafka. In a local
session both runs hand the replay's input off as local files, and the resumed run's saved states
are read by the driver (`coordinator_audit.jobs.nightly.read_state_batches`), not by a Spark job."""

from __future__ import annotations

import contextlib
import io
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from benchmarks.kafka_input import KafkaBroker, interceptor_jar, kafka_source_jars, load_records
from coordinator_audit.core.sim.scale import ScaleConfig, generate
from coordinator_audit.jobs.audit import RunSummary, run_audit
from coordinator_audit.jobs.config import load_config
from tools.make_samples import to_table

pytestmark = pytest.mark.kafka

PARTITIONS = 3
COMPARED = ("generations", "assignments", "rebalance_causes", "violations", "offset_commits", "quarantine")
RUN_COLUMNS = {"run_id", "run_window"}


def _halves(tmp_path: Path) -> tuple[Path, Path, datetime]:
    """A scale-mode log (static and cooperative groups, rebalance storms) cut in two at a whole
    second in its middle, as two Parquet inputs, and that second."""
    config = ScaleConfig(records=6000, groups=24, seed=11, duration_ms=600_000, offsets_partitions=PARTITIONS,
                         storm_fraction=0.3, max_members=6, static_fraction=0.3, cooperative_fraction=0.4)
    log = pa.concat_tables([to_table(b.partition, b.offset, b.timestamp_ms, b.key, b.value)
                            for b in generate(config, partitions=range(PARTITIONS), batch_rows=2000)])
    span = pc.min_max(log.column("timestamp")).as_py()
    cut = (span["min"] + (span["max"] - span["min"]) / 2).replace(microsecond=0, tzinfo=UTC)
    first = pc.less(log.column("timestamp"), pa.scalar(cut.replace(tzinfo=None), log.column("timestamp").type))
    out = []
    for name, keep in (("first", first), ("second", pc.invert(first))):
        (tmp_path / name).mkdir()
        pq.write_table(log.filter(keep), tmp_path / name / "log.parquet")
        out.append(tmp_path / name)
    return out[0], out[1], cut


def _audit(spark, bootstrap: str, out: Path, **window: str) -> tuple[RunSummary, str]:
    cfg = load_config(None, {"input.path": "", "input.kafka_bootstrap": bootstrap, "output.path": str(out),
                             "job.shards": 2, **({"output.write_mode": "append", **window} if window else {})})
    log = io.StringIO()
    with contextlib.redirect_stderr(log):
        summary = run_audit(spark, cfg)
    sys.stderr.write(log.getvalue())
    return summary, log.getvalue()


def _rows(out: Path, table: str) -> Counter:
    arrow = DeltaTable(str(out / table)).to_pyarrow_table()
    arrow = arrow.select([c for c in arrow.column_names if c not in RUN_COLUMNS])
    return Counter(repr(tuple(r.values())) for r in arrow.to_pylist())


def test_a_run_resumed_through_kafka_equals_one_run_over_the_whole_log(spark, tmp_path: Path) -> None:
    first, second, cut = _halves(tmp_path)
    interceptor = interceptor_jar(kafka_source_jars())
    broker = KafkaBroker(tmp_path / "broker", partitions=PARTITIONS).start()
    try:
        load_records(spark, str(first), broker.bootstrap, PARTITIONS, interceptor)
        one, _ = _audit(spark, broker.bootstrap, tmp_path / "chain", **{"window.until": cut.isoformat()})
        load_records(spark, str(second), broker.bootstrap, PARTITIONS, interceptor, append=True)
        two, log = _audit(spark, broker.bootstrap, tmp_path / "chain", **{"window.since": cut.isoformat()})
        whole, _ = _audit(spark, broker.bootstrap, tmp_path / "whole")
    finally:
        broker.stop()
    assert (one.resume, two.resume, whole.resume) == ("fresh", "resume", "fresh")
    halves = [pq.read_metadata(p / "log.parquet").num_rows for p in (first, second)]
    assert [one.counts["records_in"], two.counts["records_in"]] == halves and min(halves) > 2000
    assert whole.counts["records_in"] == sum(halves)
    assert "replay input: handed from task to task as local files" in log
    assert "read by the driver" in log  # the saved states: coordinator_audit.jobs.nightly.read_state_batches
    assert two.rows_merged  # the second run closed or continued rows the first left open
    for table in COMPARED:
        assert _rows(tmp_path / "whole", table) == _rows(tmp_path / "chain", table), table
