"""The audit job against a bare scan and the job a user would write by hand, at scale.

    .venv/bin/python -m benchmarks                       # 20M records, 5,000 groups, local[2]
    .venv/bin/python -m benchmarks --records 2000000 --groups 500 --no-scaling --skip delta_input,kafka_input

One run, one SparkSession (the job's own `build_session`, `--master` local[2] by default), one set
of inputs. Prints a table and writes `benchmark.json` (path printed) with every figure, the speed
figures (`audit_marginal_over_bare_scan_marginal`, `offset_path_marginal_over_bare_scan_marginal`,
`audit_fixed_seconds`, `peer_over_audit`, `python_worker_peak_rss_mib`, `replay_share`,
`delta_input_audit_marginal_over_bare_scan_marginal`, ...), the single-input ratios, and each
target with the measured value and whether it is met. Figures are wall-clock on whatever else the
machine is doing: the JSON records the load average before and after and after every Spark step
(`loadavg_max_1min`); compare ratios within one run.

The package: `harness` (command line, inputs, steps, the child process, fits), `measures` (the bare
scan, the offset path, the audit, the pure-Python replay rates), `peer` (the hand-written peer),
`memory` (the RSS sampler, one group's memory), `report` (figures, targets, table, JSON). The
`bench_*.py` scripts beside it are smaller, separate benchmarks. None of it is in the wheel.

Input: the simulator's scale mode (`coordinator_audit.core.sim.scale`, written by
`tools.make_samples.write_scale`) as Kafka-source Parquet under
`<cache-dir>/input-r<records>-g<groups>-s<seed>/`; reused when its `_manifest.json` matches the
whole `ScaleConfig`, generated otherwise (about 2 minutes per 10M records on 2 cores). The Delta
inputs are the same records written once with delta-rs beside it (`input-...-s<seed>.delta/`).

Measurements (`--skip NAME` leaves one out; its figures and ratios become null):

* `bare_scan`: count + sum(length(key) + length(value)) of the input: the floor. Run before and
  after the other Spark measurements of the main input; the smaller is the denominator of the
  single-input ratios.
  Each Parquet bare scan is followed by two floors of its own (`measures.measure_read_floors`),
  fitted like the rest at the scaling points: `python_read` (the single pass's columns read with
  pyarrow in the Python workers, in the job's own work units, nothing else done: what any pass in
  Python pays) and `jvm_commit_summary` (the offset-commit records grouped by key in Spark alone,
  count and min/max offset, no value decoded, no log order: what a pass kept in the JVM pays).
  Their slopes over the bare scan's (`python_read_marginal_over_bare_scan_marginal`,
  `jvm_commit_summary_marginal_over_bare_scan_marginal`) show how low the offset path's and the
  audit's marginal ratios can go here; the targets' notes quote them.
* `offset_path`: the job's offset-commit path alone on the raw input
  (`coordinator_audit.jobs.offsets_path.offset_path`: the single pass, then the replay asked for `offset_commits`
  and `violations` only), both outputs forced with a write to Spark's `noop` sink. Its two steps
  are timed apart (`stage_seconds`: `pass`, `coordinator_audit.jobs.offsets_path.offset_scan`; `replay`,
  `replay_offsets` and the two writes), as the audit's stages are from its log lines (`pass`,
  `replay`, `write`: `measures.stage_seconds`). In the scaling series each stage is a measurement
  of its own (`offset_path_pass`, `offset_path_replay`, `audit_pass`, `audit_replay`,
  `audit_write`: the best of the point's runs, fitted), and the figures give their slopes and
  their ratios to the bare scan's (`offset_path_replay_marginal_over_bare_scan_marginal`, ...):
  which part of a marginal ratio is whose.
* `audit_first` and `audit`: `coordinator_audit.jobs.audit.run_audit` end to end (read, the single pass, replay,
  offset path, every Delta table written): `audit_first` is the session's first job and pays its
  warm-up (JVM JIT, code generation, Python workers), as a nightly run in a fresh session does;
  `audit`, after it, is the warm steady state that the figures use. A background thread samples
  the RSS of the driver JVM and of the Python workers (`/proc`) meanwhile.
* `peer`: what a Spark user writes without this project (`benchmarks.peer`): a row-at-a-time
  Python UDF decoding every record, then a groupBy for the offset summary, written to `noop`.
* `replay` (one process = one core, no Spark): GroupMetadata records/s and offset commits/s of the
  pure-Python audit (`GroupAuditor`). Reported, not a target.
  `replay_share` is the replay's share of the faster warm audit: the Python time the job's replay
  spent feeding records through the groups' audits (the GroupMetadata replay through Kafka's load
  path, the observer, quarantine: the job's `replay: ...` log line, `coordinator_audit.udfs.replay.TIMING_FIELDS`
  summed over the workers) over that run's core-seconds (wall time x Spark's cores). Measured
  inside the run, never estimated; target < 20%. Since the replay also merges the single pass's
  offset-commit stretches (`GroupAuditor.merge_stretch`), its stage's wall time is reported beside
  it (`stage_share`) but is not the replay's cost alone.
* `whatif` (`benchmarks/bench_whatif.py`): `--whatif-groups` (300) random simulated groups audited
  (`audit_group`), then swept as `coordinator_audit.jobs.whatif --sweep` does per group (the history
  fitted to the actual configuration, then four assignors x static membership off and on), in CPU
  seconds of one process: `sweep_over_audit`, and the sweep's time for 5,000 such groups at that
  rate; then, on `--whatif-product-groups` (5,000) such groups, the product's two commands timed as
  a user runs them, `coordinator-audit run` and `coordinator-audit whatif --sweep`:
  `product_sweep_over_audit`. Reported, not a target.
* `memory`: the peaks sampled during the audits (per scaling point: the Python workers' peak RSS
  must not grow with the input, it is bounded by `job.scan_chunk_rows`), plus one group with
  `--single-group-commits` (5M) offset commits streamed through `GroupAuditor` in a fresh process.
* `derived`: the warm audit without the derived tables (`job.derived_tables = false`) once before
  and once after the warm audit, and the warm audit once more; `derived_over_base` = best audit
  with / best audit without.
* `scaling`: the bare scan, the offset path and the warm audit at `--scaling-factors` (1,2,4,8) x
  `--scaling-base` records (default a quarter of `--records`: 5M, 10M, 20M, 40M; groups scaled
  alike, so the record mix is the same), each its own input, each point the best of two runs (the
  main input's point reuses its main runs), the runs interleaved across points. A least-squares
  fit per measurement gives its slope (seconds per million records: the marginal cost) and
  intercept (the fixed cost): `audit_marginal_over_bare_scan_marginal` (target <= 2),
  `offset_path_marginal_over_bare_scan_marginal` (<= 1.5), `audit_fixed_seconds` (<= 6).
* `fixed_groups`: the same three at the same record counts, but with `--groups` groups at every point
  (its own inputs, `input-r<records>-g<groups>-s<seed>`; the main input's point is shared with
  `scaling`). Scale mode writes each group's metadata first and then whole commit rounds, so here
  the generations, and with them every table the audit writes, are the same at every point: only
  the offset commits grow. Its slopes are the cost per record alone
  (`fixed_groups_audit_marginal_over_bare_scan_marginal`,
  `fixed_groups_offset_path_marginal_over_bare_scan_marginal`), its intercept the cost of the
  groups and their output. The `scaling` series, where the output grows with the input, stays the
  one the targets are stated on; their notes quote these beside it.
* `delta_input`: the bare scan and the warm audit with the input as a Delta table that Spark reads
  itself (the job's `input.format = "delta"`), at `--delta-factors` (1,4) x `--scaling-base`,
  best of two runs each: `delta_input_audit_marginal_over_bare_scan_marginal` (over the Delta
  table's own bare scan; also reported over the Parquet bare scan) and
  `delta_input_audit_fixed_seconds`.
* `kafka_input`: the same with the input in a real broker (`benchmarks.kafka_input`), at
  `--kafka-factors` (1,4) x `--scaling-base`: one single-node Kafka 4 broker per point
  (`scripts/kafka.sh`), its `__consumer_offsets` loaded with the point's records in log order
  (Spark's Kafka sink as the client `__admin_client`; the records' timestamps become the produce
  time), then the bare scan and the warm audit read through the job's `--kafka-bootstrap` path
  (`coordinator_audit.jobs.kafka_source.read_kafka`, Spark's Kafka source), best of two runs each, in a child session
  of their own with the Kafka source's jars (`scripts/jars.sh spark`, from Maven Central; Delta
  Spark's left out, so the audit writes with the embedded writer as elsewhere). Figures:
  `kafka_input_audit_marginal_over_bare_scan_marginal` (over the Kafka bare scan),
  `kafka_input_bare_scan_marginal_over_parquet_bare_scan_marginal` (what reading through the
  Kafka source costs over reading Parquet files) and `kafka_input_audit_fixed_seconds`. Needs
  Maven and about 150 bytes of disk per record under `--work-dir` while it runs; when the jars or
  a broker cannot be had, the report says why and the other measurements stand.

Spark measurements run in a child process with one session (`--in-process`: in this process's
session instead, as the tests do). A step that kills the JVM (local mode dies with an executor's
OutOfMemoryError) is recorded as failed and the remaining steps go on in a fresh session with the
same settings. The driver heap defaults to 6g here (`harness.DEFAULT_DRIVER_MEMORY`).

The default full run (20M records, 5,000 groups; scaling at 5M/10M/20M/40M, Delta and Kafka at
5M/20M) takes about a quarter of an hour on a 2-core machine once the inputs exist (the Kafka
input's brokers, loads and runs about a third of it). Generating the inputs adds
about 2 minutes per 10M records the first time, the Delta copies about 3 s per 5M records, the
Kafka source's jars (Maven Central, cached under `.cache/jars`) a minute or two the first time.
"""
