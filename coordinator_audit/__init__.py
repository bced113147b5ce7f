"""coordinator-audit: the history of Kafka consumer groups, rebuilt from `__consumer_offsets`.

`coordinator_audit.core` is pure Python (the record codec, the group coordinator's port, the
assignors, the simulator and the audit); `coordinator_audit.udfs` and `coordinator_audit.jobs` are the
Spark edge (the single pass, the per-group replay, the Delta tables, the command line)."""
