"""Writes simulator sample logs to data/samples/ as Kafka-source Parquet, with their ground truth.

    .venv/bin/python -m tools.make_samples            # regenerate data/samples/sim_*.parquet + .truth.json
    .venv/bin/python -m tools.make_samples --check    # exit 1 if regenerating would change any byte

Each sample is one library scenario (coordinator_audit/core/sim/scenarios/<name>.json), written as the Java
coordinator (Kafka 4.x, the simulator's default) writes its log: `sim_<name>.*`; a few are also
written as the Scala coordinator (<= 3.x) does, under their own group (`<group>-scala`):
`sim_scala_<name>.*`. The Parquet schema is
the Kafka source's: key binary, value binary, topic string, partition int, offset long, timestamp
timestamp (UTC, ms). `write_scale` writes a scale-mode run (the benchmark, `benchmarks/harness.py`, uses it).
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator_audit.core.sim.log import LogRecord
from coordinator_audit.core.sim.runner import run_scenario
from coordinator_audit.core.sim.scenario import Scenario

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"
LIBRARY = ROOT / "coordinator_audit" / "core" / "sim" / "scenarios"
TOPIC = "__consumer_offsets"

KAFKA_SOURCE_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("ms", tz="UTC")),
])

#: library scenarios written as samples: eager, cooperative, static, failover, partial history, violations
SAMPLE_SCENARIOS = ("eager-rolling-bounce", "coop-scale-out", "static-rolling-bounce", "eager-coordinator-failover",
                    "partial-eager-scale-out", "bug-stale-claims-after-pause", "bug-duplicate-assignment")

#: library scenarios also written as samples by the Scala coordinator (no creation record)
SCALA_SAMPLE_SCENARIOS = ("eager-restart-leave-then-join", "eager-leader-rejoin-during-expiry")


def to_table(partition: Sequence[int], offset: Sequence[int], timestamp_ms: Sequence[int],
             key: Sequence[bytes], value: Sequence[bytes | None]) -> pa.Table:
    n = len(offset)
    return pa.table({
        "key": pa.array(key, pa.binary()), "value": pa.array(value, pa.binary()),
        "topic": pa.array([TOPIC] * n, pa.string()) if n else pa.array([], pa.string()),
        "partition": pa.array(partition, pa.int32()), "offset": pa.array(offset, pa.int64()),
        "timestamp": pa.array(timestamp_ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
    }, schema=KAFKA_SOURCE_SCHEMA)


def records_table(records: Iterable[LogRecord]) -> pa.Table:
    rs = list(records)
    return to_table([r.partition for r in rs], [r.offset for r in rs], [r.timestamp_ms for r in rs],
                    [r.key for r in rs], [r.value for r in rs])


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", store_schema=True, write_statistics=True)
    return buf.getvalue()


def sample_files(names: Iterable[str] = SAMPLE_SCENARIOS,
                 scala_names: Iterable[str] = SCALA_SAMPLE_SCENARIOS) -> dict[str, bytes]:
    """file name -> bytes of every sample (Parquet and truth JSON), computed in memory."""
    out: dict[str, bytes] = {}
    runs = [(f"sim_{name}", Scenario.load(LIBRARY / f"{name}.json")) for name in names]
    for name in scala_names:
        scenario = Scenario.load(LIBRARY / f"{name}.json")
        runs.append((f"sim_scala_{name}", replace(scenario, flavor="scala", group=f"{scenario.group}-scala")))
    for stem, scenario in runs:
        result = run_scenario(scenario)
        out[f"{stem}.parquet"] = parquet_bytes(records_table(result.records))
        out[f"{stem}.truth.json"] = result.truth.to_json().encode()
    return out


def write_samples(directory: Path = SAMPLES, *, check: bool = False) -> list[str]:
    """Writes the samples (or, with check=True, lists the files whose bytes would change)."""
    changed = []
    for fname, data in sample_files().items():
        path = directory / fname
        if path.exists() and path.read_bytes() == data:
            continue
        changed.append(fname)
        if not check:
            directory.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return changed


def write_scale(config: object, out_dir: Path, *, workers: int = 2, batch_rows: int = 262_144) -> dict[str, int]:
    """Writes a scale-mode run as Parquet files (one per worker) under `out_dir`; returns row counts."""
    from multiprocessing import get_context

    from coordinator_audit.core.sim.scale import ScaleConfig

    assert isinstance(config, ScaleConfig)
    out_dir.mkdir(parents=True, exist_ok=True)
    shares = [list(range(w, config.offsets_partitions, workers)) for w in range(workers)]
    jobs = [(config, share, str(out_dir / f"part-{w:03d}.parquet"), batch_rows) for w, share in enumerate(shares)]
    if workers == 1:
        counts = [_write_share(*jobs[0])]
    else:
        with get_context("fork").Pool(workers) as pool:
            counts = pool.starmap(_write_share, jobs)
    return {Path(j[2]).name: c for j, c in zip(jobs, counts, strict=True)}


def _write_share(config: object, partitions: list[int], path: str, batch_rows: int) -> int:
    from coordinator_audit.core.sim.scale import generate

    rows = 0
    with pq.ParquetWriter(path, KAFKA_SOURCE_SCHEMA, compression="zstd") as writer:
        for b in generate(config, partitions=partitions, batch_rows=batch_rows):  # type: ignore[arg-type]
            writer.write_table(to_table(b.partition, b.offset, b.timestamp_ms, b.key, b.value))
            rows += len(b)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report files that would change")
    parser.add_argument("--out", type=Path, default=SAMPLES)
    args = parser.parse_args(argv)
    changed = write_samples(args.out, check=args.check)
    verb = "would change" if args.check else "written"
    print(f"{len(changed)} sample file(s) {verb}: {', '.join(changed) or '-'}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
