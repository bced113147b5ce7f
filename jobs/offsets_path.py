"""The offset-commit path in Spark SQL: record classification, offset-commit decode, the
`offset_commits` summary and the `offset_regression` violations, without per-record Python.

Definitions (the same as `coordinator_core.audit.offsets`, which the pure-Python audit follows;
the job's tests compare the two):

* Input: Kafka-source rows, one per (partition, offset) (`jobs.inputs` deduplicates). Log order
  = ascending (partition, offset) within a group; all of a group's records normally live in one
  `__consumer_offsets` partition.
* **Generation window**: each GroupMetadata record of the group (key type 2: a value or a
  tombstone) closes the current window and opens the next. The window's `generation_id` is the
  opening value's generation (None for a tombstone and before the first record); `window_state`
  is "Stable" if the opening value lists members, "Empty" if not, "Dead" for a tombstone, None
  before the first GroupMetadata record ("pre-history"). `window_start_offset` /
  `window_end_offset` are the log offsets of the opening / closing records (None: pre-history /
  still open). A same-generation static replacement (W3) starts a new window with the same id.
  GroupMetadata records the replay quarantines do not open windows: pass their positions as
  `exclude` (`offset_commits(..., exclude=...)`) for exact agreement; by default every type-2
  record whose value's generation and member count are readable opens a window.
* **Commit**: an offset-commit record (key type 0 or 1) with a value that decodes (versions 0-3,
  and 4+ read with the flexible v4 layout); a null value is an offset **tombstone** (counted, not
  a commit). Keys of type 0 and 1 for the same group/topic/partition are one sequence.
  Undecodable values and keys take no part (the replay quarantines them).
* One **row** per (group, topic, partition, window) with at least one commit or tombstone:
  commits, tombstones, first/last committed offset and commitTimestamp in log order (None when
  only tombstones), first/last source offset over all its records (commits and tombstones).
* **Regression** ("a committed offset moving backwards while the group is Stable in one
  generation"): in a window whose state is "Stable", a commit whose offset is strictly lower than
  that of the previous commit (log order) of the same topic-partition in the same window;
  tombstones in between do not reset the comparison. Each one is counted in `regressions` and
  gives one `offset_regression` violation row (member_ids = the members the window's opening
  record assigns that partition to; detail and evidence texts as the pure path writes them).

How it stays cheap (issue 9 measured `conv(hex(substring(...)))` at ~0.1 us per field per record,
and binary aggregation buffers forcing Spark's slow sort-based aggregation):

* Classification reads the key's int16 type by comparing the first two bytes with literals, and
  the group length by `ascii()` of its low byte (exact for lengths < 128 with a zero high byte;
  anything else falls back to `conv`). No string parsing per record.
* Group, topic and partition are never decoded per commit: commits are grouped by the raw key
  bytes after the group (`tp_key`), and each distinct key is decoded once, after aggregation.
* The offset comparison for regressions compares the 8 raw big-endian bytes (sign-aware byte
  compare), with no conversion to a number.
* Numbers (first/last offset and commit time, the regressions' details) are decoded only on the
  few rows that are first, last or regressing in their window (`CASE` evaluates lazily), so every
  aggregation buffer is fixed-width.
* Value validity takes a byte-compare fast path for the common layout (v3, empty metadata).
* The one unavoidable cost is the ordering: "previous commit" and "latest GroupMetadata before"
  need log order, hence one shuffle of narrow rows by group and a sort within partitions
  (`benchmarks/bench_offsets.py` measures it).

Also here: `classify` (record type and group id for every record, for the lead's repartition by
group) and `decode_offset_commits` (every field of every offset-commit record, in SQL).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

__all__ = [
    "OFFSET_COMMIT_TYPES",
    "classify",
    "decode_offset_commits",
    "group_metadata_windows",
    "offset_commits",
    "offset_regression_violations",
    "sql_commit_condition",
]

OFFSET_COMMIT_TYPES = (0, 1)
GROUP_METADATA_TYPE = 2


# ------------------------------------------------------------------------------------------------
# SQL building blocks (strings, so they compose inside CASE and window expressions)


def _u(col: str, pos: str | int, n: int) -> str:
    """Unsigned big-endian integer of n bytes at 1-based `pos`."""
    return f"cast(conv(hex(substring({col}, {pos}, {n})), 16, 10) as bigint)"


def _s16(col: str, pos: str | int) -> str:
    return f"((({_u(col, pos, 2)}) + 32768) % 65536 - 32768)"


def _s32(col: str, pos: str | int) -> str:
    return f"((({_u(col, pos, 4)}) + 2147483648) % 4294967296 - 2147483648)"


def _s64(col: str, pos: str | int) -> str:
    return f"cast(conv(hex(substring({col}, {pos}, 8)), 16, -10) as bigint)"


def _byte(col: str, pos: str | int) -> str:
    """One byte as 0..255 (cheap: Latin-1 decode of one byte, then its code point)."""
    return f"ascii(decode(substring({col}, {pos}, 1), 'ISO-8859-1'))"


def _s16b(col: str, pos: str | int) -> str:
    """Signed int16 at 1-based `pos` from its two bytes (compact code; for rare paths)."""
    hi, lo = _byte(col, pos), _byte(col, f"({pos}) + 1")
    return f"(CASE WHEN substring({col}, {pos}, 1) < X'80' THEN {hi} * 256 ELSE ({hi} - 256) * 256 END + {lo})"


# the int16 record type of a key, without number parsing for the known types
_RECORD_TYPE = (
    "CASE WHEN key IS NULL OR length(key) < 2 THEN NULL "
    "WHEN substring(key, 1, 2) = X'0001' THEN 1 WHEN substring(key, 1, 2) = X'0002' THEN 2 "
    "WHEN substring(key, 1, 2) = X'0000' THEN 0 "
    f"ELSE {_s16b('key', 1)} END"
)

# int16 length of the group string at bytes 3-4 (every classic and KIP-848 key starts with the group)
_GROUP_LEN = (
    "CASE WHEN length(key) < 4 THEN NULL "
    "WHEN substring(key, 3, 1) = X'00' AND substring(key, 4, 1) < X'80' "
    "THEN ascii(cast(substring(key, 4, 1) AS string)) "
    f"ELSE {_s16b('key', 3)} END"
)


def classify(df: DataFrame) -> DataFrame:
    """Adds `record_type` (the key's int16 type; null when the key is shorter than 2 bytes) and
    `group_id` (the key's group string; null when it cannot be read), in SQL. Keys of control
    records are not distinguished (the Kafka-source schema carries no batch attributes)."""
    from pyspark.sql import functions as F

    return (df.withColumn("record_type", F.expr(_RECORD_TYPE).cast("smallint"))
            .withColumn("_glen", F.expr(_GROUP_LEN).cast("int"))
            .withColumn("group_id", F.expr(
                "CASE WHEN _glen >= 0 AND length(key) >= 4 + _glen THEN cast(substring(key, 5, _glen) AS string) END"))
            .drop("_glen"))


# ------------------------------------------------------------------------------------------------
# OffsetCommitValue layout (spec §7.3), as SQL over the column `v`

_V = "value"
# v4+ compact metadata length: uvarint(len + 1) at byte 15; one or two bytes handled
_B15 = _byte(_V, 15)
_B16 = _byte(_V, 16)
_V4_VARINT_LEN = f"CASE WHEN {_B15} < 128 THEN 1 WHEN {_B16} < 128 THEN 2 END"
_V4_MLEN = (f"CASE WHEN {_B15} < 128 THEN {_B15} - 1 "
            f"WHEN {_B16} < 128 THEN ({_B15} - 128) + {_B16} * 128 - 1 END")


def _value_columns(prefix: str = "") -> dict[str, str]:
    """Compact SQL for the OffsetCommitValue layout fields over `value` (byte reads, no number
    parsing): value_version (-1 unless the int16 is 0..255), metadata_length, varint_len."""
    ver = f"(CASE WHEN substring({_V}, 1, 1) = X'00' THEN {_byte(_V, 2)} ELSE -1 END)"
    return {
        "value_version": ver,
        "metadata_length": (f"(CASE WHEN {ver} IN (0, 1, 2) THEN {_s16b(_V, 11)} WHEN {ver} = 3 THEN {_s16b(_V, 15)} "
                            f"WHEN {ver} >= 4 THEN {_V4_MLEN} END)"),
        "varint_len": f"(CASE WHEN {ver} >= 4 THEN {_V4_VARINT_LEN} ELSE 0 END)",
    }


def decode_offset_commits(df: DataFrame) -> DataFrame:
    """Every field of the offset-commit records (key types 0/1) of a classified DataFrame, in SQL:
    group_id, topic, partition_key (the key's partition), and from the value: value_version,
    offset_value, leader_epoch (-1 before v3), metadata_length, commit_timestamp, expire_timestamp
    (-1 unless v1), tombstone, valid (the value decodes), metadata_length_unsupported (a v4+
    compact length needing more than two varint bytes: metadata over 16,382 bytes). The log
    position columns (partition, offset, timestamp) are kept."""
    from pyspark.sql import functions as F

    cols = _value_columns()
    d = classify(df) if "record_type" not in df.columns else df
    d = d.where(F.col("record_type").isin(*OFFSET_COMMIT_TYPES))
    d = (d.withColumn("_glen", F.expr(_GROUP_LEN).cast("int"))
         .withColumn("tp_key", F.expr("substring(key, 5 + _glen)"))
         .transform(_decode_tp_key)
         .withColumn("tombstone", F.col("value").isNull())
         .withColumn("value_version", F.expr(cols["value_version"]).cast("smallint"))
         .withColumn("metadata_length", F.expr(cols["metadata_length"]).cast("int"))
         .withColumn("_vlen", F.expr(cols["varint_len"]).cast("int")))
    ts_pos = ("CASE WHEN value_version IN (0, 1, 2) THEN 13 + metadata_length "
              "WHEN value_version = 3 THEN 17 + metadata_length "
              "WHEN value_version >= 4 THEN 15 + _vlen + metadata_length END")
    d = d.withColumn("_ts_pos", F.expr(ts_pos))
    need = ("_ts_pos + 7 + CASE WHEN value_version = 1 THEN 8 WHEN value_version >= 4 THEN 1 ELSE 0 END")
    valid = (f"value IS NOT NULL AND value_version >= 0 AND metadata_length >= 0 AND length(value) >= {need}")
    return (d.withColumn("valid", F.expr(f"coalesce({valid}, false)"))
            .withColumn("value_version", F.expr("CASE WHEN value IS NOT NULL THEN value_version END"))
            .withColumn("metadata_length", F.expr("CASE WHEN valid THEN metadata_length END"))
            .withColumn("metadata_length_unsupported",
                        F.expr("value IS NOT NULL AND value_version >= 4 AND _vlen IS NULL"))
            .withColumn("offset_value", F.expr(f"CASE WHEN valid THEN {_s64(_V, 3)} END"))
            .withColumn("leader_epoch", F.expr(
                f"CASE WHEN valid THEN CASE WHEN value_version >= 3 THEN {_s32(_V, 11)} ELSE -1 END END").cast("int"))
            .withColumn("commit_timestamp", F.expr(f"CASE WHEN valid THEN {_s64(_V, '_ts_pos')} END"))
            .withColumn("expire_timestamp", F.expr(
                f"CASE WHEN valid THEN CASE WHEN value_version = 1 THEN {_s64(_V, '_ts_pos + 8')} ELSE -1 END END"))
            .drop("_glen", "_vlen", "_ts_pos"))


def _decode_tp_key(df: DataFrame) -> DataFrame:
    """topic and partition_key from `tp_key` (the key bytes after the group string)."""
    from pyspark.sql import functions as F

    tlen = _s16("tp_key", 1)
    return (df.withColumn("_tlen", F.expr(f"CASE WHEN length(tp_key) >= 2 THEN {tlen} END").cast("int"))
            .withColumn("topic", F.expr(
                "CASE WHEN _tlen >= 0 AND length(tp_key) >= 6 + _tlen THEN cast(substring(tp_key, 3, _tlen) AS string) END"))
            .withColumn("partition_key", F.expr(f"CASE WHEN topic IS NOT NULL THEN {_s32('tp_key', '3 + _tlen')} END")
                        .cast("int"))
            .drop("_tlen"))


# ------------------------------------------------------------------------------------------------
# GroupMetadata windows

def _gm_value_columns(df: DataFrame) -> DataFrame:
    """generation and member_count of GroupMetadataValue (spec §7.4), in SQL; null when unreadable."""
    from pyspark.sql import functions as F

    v = "value"
    d = df.withColumn("_ver", F.expr(f"CASE WHEN length(value) >= 2 THEN {_s16(v, 1)} END"))
    # non-flexible (v0-v3): protocolType string, generation int32, protocol/leader nullable strings,
    # [v2+ currentStateTimestamp int64], members array (int32 count)
    d = (d.withColumn("_l1", F.expr(f"{_s16(v, 3)}"))
         .withColumn("_gpos", F.expr("5 + _l1"))
         .withColumn("_l2", F.expr(f"{_s16(v, '_gpos + 4')}"))
         .withColumn("_p3", F.expr("_gpos + 6 + greatest(_l2, 0)"))
         .withColumn("_l3", F.expr(f"{_s16(v, '_p3')}"))
         .withColumn("_mpos", F.expr("_p3 + 2 + greatest(_l3, 0) + CASE WHEN _ver >= 2 THEN 8 ELSE 0 END")))
    # flexible (v4+): compact strings, uvarint lengths + 1 (one byte each is enough for the names
    # Kafka writes here; longer ones leave the record unreadable, i.e. null)
    d = (d.withColumn("_c1", F.expr(f"{_byte(v, 3)}"))
         .withColumn("_fgpos", F.expr("4 + _c1 - 1"))
         .withColumn("_c2", F.expr(f"{_byte(v, '_fgpos + 4')}"))
         .withColumn("_fp3", F.expr("_fgpos + 5 + greatest(_c2 - 1, 0)"))
         .withColumn("_c3", F.expr(f"{_byte(v, '_fp3')}"))
         .withColumn("_fmpos", F.expr("_fp3 + 1 + greatest(_c3 - 1, 0) + 8"))
         .withColumn("_fm", F.expr(f"{_byte(v, '_fmpos')}")))
    flex_ok = "_c1 BETWEEN 1 AND 127 AND _c2 < 128 AND _c3 < 128 AND _fm BETWEEN 1 AND 127"
    d = d.withColumn("generation", F.expr(
        f"CASE WHEN _ver BETWEEN 0 AND 3 AND _l1 >= 0 AND length(value) >= _mpos + 3 THEN {_s32(v, '_gpos')} "
        f"WHEN _ver >= 4 AND {flex_ok} AND length(value) >= _fmpos THEN {_s32(v, '_fgpos')} END").cast("int"))
    d = d.withColumn("member_count", F.expr(
        f"CASE WHEN generation IS NULL THEN NULL WHEN _ver <= 3 THEN {_s32(v, '_mpos')} ELSE _fm - 1 END").cast("int"))
    return d.drop("_ver", "_l1", "_gpos", "_l2", "_p3", "_l3", "_mpos", "_c1", "_fgpos", "_c2", "_fp3", "_c3",
                  "_fmpos", "_fm")


def group_metadata_windows(classified: DataFrame, *, exclude: DataFrame | None = None) -> DataFrame:
    """One row per window-opening GroupMetadata record: group_id, partition, offset, generation_id,
    window_state, window_end_offset (next opening record's offset of the group), key, value.
    `exclude` (columns partition, offset) lists records that must not open windows (the replay's
    quarantined GroupMetadata records). Small: GroupMetadata records are a few percent of a log."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    gm = classified.where((F.col("record_type") == GROUP_METADATA_TYPE) & F.col("group_id").isNotNull())
    gm = _gm_value_columns(gm.select("group_id", "partition", "offset", "key", "value"))
    gm = gm.where(F.col("value").isNull() | F.col("generation").isNotNull())
    if exclude is not None:
        gm = gm.join(exclude.select("partition", "offset"), ["partition", "offset"], "left_anti")
    w = Window.partitionBy("group_id").orderBy("partition", "offset")
    return gm.select(
        "group_id", "partition", "offset",
        F.when(F.col("value").isNotNull(), F.col("generation")).alias("generation_id"),
        F.when(F.col("value").isNull(), F.lit("Dead"))
        .when(F.col("member_count") > 0, F.lit("Stable")).otherwise(F.lit("Empty")).alias("window_state"),
        F.lead("offset").over(w).alias("window_end_offset"),
        "key", "value",
    )


# ------------------------------------------------------------------------------------------------
# the summary

_POS_SHIFT = 40
_OFFSET_MASK = (1 << _POS_SHIFT) - 1


def _pos_column() -> object:
    from pyspark.sql import functions as F

    return F.shiftleft(F.col("partition").cast("long"), _POS_SHIFT) + F.col("offset")


_FAST_V3 = "substring(value, 1, 2) = X'0003' AND substring(value, 15, 2) = X'0000'"


def sql_commit_condition() -> Column:
    """True for the records of a classified DataFrame that this module decodes and summarises (the
    offset commits and tombstones with well-formed keys and values); the job sends every other
    record through the Python replay, which decodes or quarantines it. The two sets partition the
    input, so nothing is counted twice or lost."""
    from pyspark.sql import functions as F

    is_commit = F.col("record_type").isin(*OFFSET_COMMIT_TYPES) & F.col("group_id").isNotNull()
    return F.coalesce(is_commit & F.expr(_commit_valid_sql().replace("_glen", f"({_GROUP_LEN})")), F.lit(False))


def _bind(expr: str, name: str, body: str) -> str:
    """SQL evaluating `expr` once and `body` with it bound to `name` (a lambda; interpreted, so use
    it on rare paths only: it keeps the generated code of the common path small)."""
    return f"element_at(transform(array({expr}), {name} -> {body}), 1)"


def _slow_layout(body: str) -> str:
    """`body` with `ver` (value version), `m` (metadata length) and `vl` (v4 varint length) bound."""
    cols = _value_columns()
    mlen = (f"CASE WHEN ver IN (0, 1, 2) THEN {_s16b(_V, 11)} WHEN ver = 3 THEN {_s16b(_V, 15)} "
            f"WHEN ver >= 4 THEN {_V4_MLEN} END")
    vlen = f"CASE WHEN ver >= 4 THEN {_V4_VARINT_LEN} ELSE 0 END"
    return _bind(cols["value_version"], "ver", _bind(mlen, "m", _bind(vlen, "vl", body)))


_SLOW_VALID = _slow_layout(
    "coalesce(ver >= 0 AND m >= 0 AND length(value) >= CASE WHEN ver IN (0, 2) THEN 20 + m "
    "WHEN ver = 1 THEN 28 + m WHEN ver = 3 THEN 24 + m ELSE 23 + vl + m END, false)")
_SLOW_TS_POS = _slow_layout("CASE WHEN ver IN (0, 1, 2) THEN 13 + m WHEN ver = 3 THEN 17 + m ELSE 15 + vl + m END")


def _commit_valid_sql() -> str:
    """SQL: the record is an offset-commit record this path decodes: a tombstone, or a value whose
    layout checks out (version >= 0, metadata length >= 0, enough bytes for the version), with a
    key whose topic string and partition are complete (`_glen` must be a column). Byte compares
    for the common layouts; compact interpreted code for the rest."""
    value_ok = f"CASE WHEN value IS NULL THEN true WHEN {_FAST_V3} THEN length(value) >= 24 ELSE {_SLOW_VALID} END"
    fast_key = "substring(key, 5 + _glen, 1) = X'00' AND substring(key, 6 + _glen, 1) < X'80'"
    fast_tlen = "ascii(cast(substring(key, 6 + _glen, 1) AS string))"
    slow_key = _bind(_s16b("key", "5 + _glen"), "tl", "tl >= 0 AND length(key) >= 10 + _glen + tl")
    key_ok = (f"coalesce(length(key) >= 6 + _glen AND CASE WHEN {fast_key} THEN length(key) >= 10 + _glen + {fast_tlen} "
              f"ELSE {slow_key} END, false)")
    return f"({key_ok}) AND ({value_ok})"




def _commit_events(classified: DataFrame) -> DataFrame:
    """Offset-commit records as narrow events: valid commits and tombstones only."""
    from pyspark.sql import functions as F

    c = classified.where(F.col("record_type").isin(*OFFSET_COMMIT_TYPES) & F.col("group_id").isNotNull())
    c = c.withColumn("_glen", F.expr(_GROUP_LEN).cast("int"))
    return (c.where(F.expr(_commit_valid_sql()))
            .select("group_id", F.expr("substring(key, 5 + _glen)").alias("tp_key"), "partition", "offset",
                    "timestamp", "value"))


def _commit_time_sql() -> str:
    return _s64("value", f"CASE WHEN {_FAST_V3} THEN 17 ELSE {_SLOW_TS_POS} END")


def offset_commits(classified: DataFrame, *, windows: DataFrame | None = None,
                   exclude: DataFrame | None = None, with_regressions: bool = True) -> tuple[DataFrame, DataFrame]:
    """(offset_commits rows, regression rows) of a classified, deduplicated record DataFrame.

    The first has the `offset_commits` table's columns (`udfs.schemas.TABLE_SCHEMAS`). The second
    has one row per regression (group_id, generation_id, topic, partition, offset_value,
    commit_timestamp, previous_offset, previous_commit_timestamp, previous_source_offset,
    record_timestamp, source_partition, source_offset, window_start_offset) for
    `offset_regression_violations`. `windows` defaults to `group_metadata_windows(classified,
    exclude=exclude)`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from udfs.schemas import TABLE_SCHEMAS

    wins = windows if windows is not None else group_metadata_windows(classified, exclude=exclude)
    commits = _commit_events(classified)
    gm_events = wins.select(
        "group_id", F.lit(None).cast("binary").alias("tp_key"), "partition", "offset",
        F.lit(None).cast("timestamp").alias("timestamp"), F.lit(None).cast("binary").alias("value"),
        F.struct(F.col("offset").alias("start"), F.col("generation_id").alias("gen"),
                 F.col("window_state").alias("state")).alias("_win"))
    events = commits.withColumn("_win", F.lit(None).cast(gm_events.schema["_win"].dataType)).unionByName(gm_events)

    by_group = Window.partitionBy("group_id").orderBy("partition", "offset").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    tagged = (events.withColumn("win", F.last("_win", ignorenulls=True).over(by_group))
              .where(F.col("tp_key").isNotNull()).drop("_win"))

    keys = ["group_id", "tp_key", "win"]
    ordered = Window.partitionBy(*keys).orderBy("partition", "offset")
    before = ordered.rowsBetween(Window.unboundedPreceding, -1)
    whole = Window.partitionBy(*keys)
    is_commit = F.col("value").isNotNull()
    o_bin = F.expr("substring(value, 3, 8)")
    seq = (tagged
           .withColumn("_prev_o", F.last(F.when(is_commit, o_bin), ignorenulls=True).over(before))
           .withColumn("_prev_src", F.last(F.when(is_commit, F.col("offset")), ignorenulls=True).over(before))
           .withColumn("_last_src", F.max(F.when(is_commit, F.col("offset"))).over(whole)))
    # signed comparison of two big-endian int64 byte strings without decoding them
    regress = F.expr(
        "value IS NOT NULL AND _prev_o IS NOT NULL AND win.state = 'Stable' AND "
        "CASE WHEN (substring(value, 3, 1) >= X'80') = (substring(_prev_o, 1, 1) >= X'80') "
        "THEN substring(value, 3, 8) < _prev_o ELSE substring(value, 3, 1) >= X'80' END")
    seq = (seq.withColumn("_is_first", is_commit & F.col("_prev_src").isNull())
           .withColumn("_is_last", is_commit & (F.col("offset") == F.col("_last_src")))
           .withColumn("_regress", regress))
    o_num, ts_num = F.expr(_s64("value", 3)), F.expr(_commit_time_sql())
    pos = _pos_column()  # (partition, offset) as one long, for fixed-width min/max buffers
    summary = seq.groupBy(*keys).agg(
        F.count_if(is_commit).alias("commits"),
        F.count_if(~is_commit).alias("tombstones"),
        F.max(F.when(F.col("_is_first"), o_num)).alias("first_offset"),
        F.max(F.when(F.col("_is_last"), o_num)).alias("last_offset"),
        F.max(F.when(F.col("_is_first"), ts_num)).alias("first_commit_timestamp"),
        F.max(F.when(F.col("_is_last"), ts_num)).alias("last_commit_timestamp"),
        F.count_if(F.col("_regress")).alias("regressions"),
        F.min(pos).alias("_first_pos"),
        F.max(pos).alias("_last_pos"),
    )
    ends = wins.select(F.col("group_id").alias("_eg"), F.col("offset").alias("_start"), "window_end_offset")
    firsts = wins.groupBy(F.col("group_id").alias("_fg")).agg(F.min(pos).alias("_first_gm_pos"))
    summary = (summary.transform(_decode_tp_key).where(F.col("partition_key").isNotNull())
               .join(F.broadcast(ends), (F.col("group_id") == F.col("_eg")) & (F.col("win.start") == F.col("_start")),
                     "left")
               .join(F.broadcast(firsts), F.col("group_id") == F.col("_fg"), "left"))
    out = summary.select(
        "group_id", "topic", F.col("partition_key").alias("partition"),
        F.col("win.gen").alias("generation_id"), F.col("win.state").alias("window_state"),
        F.col("win.start").alias("window_start_offset"),
        F.when(F.col("win").isNull(), F.col("_first_gm_pos").bitwiseAND(_OFFSET_MASK))
        .otherwise(F.col("window_end_offset")).alias("window_end_offset"),
        "commits", "tombstones", "first_offset", "last_offset", "first_commit_timestamp", "last_commit_timestamp",
        "regressions", F.shiftright("_first_pos", _POS_SHIFT).alias("source_partition"),
        F.col("_first_pos").bitwiseAND(_OFFSET_MASK).alias("first_source_offset"),
        F.col("_last_pos").bitwiseAND(_OFFSET_MASK).alias("last_source_offset"))
    out = _conform(out, TABLE_SCHEMAS["offset_commits"])

    regressions = (seq.where(F.col("_regress"))
                   .select("group_id", "tp_key", "partition", "offset", "timestamp", "value", "win", "_prev_src")
                   .transform(_decode_tp_key))
    prev = (tagged.where(is_commit).select(
        F.col("group_id").alias("_pg"), F.col("partition").alias("_pp"), F.col("offset").alias("_prev_src"),
        F.expr(_s64("value", 3)).alias("previous_offset"),
        F.expr(_commit_time_sql()).alias("previous_commit_timestamp")))
    prev = prev.withColumnRenamed("_prev_src", "_ps")
    regressions = regressions.join(prev, (F.col("group_id") == F.col("_pg")) & (F.col("partition") == F.col("_pp"))
                                   & (F.col("_prev_src") == F.col("_ps")), "left")
    reg = regressions.select(
        "group_id", F.col("win.gen").cast("int").alias("generation_id"), "topic",
        F.col("partition_key").alias("partition"),
        F.expr(_s64("value", 3)).alias("offset_value"), F.expr(_commit_time_sql()).alias("commit_timestamp"),
        "previous_offset", "previous_commit_timestamp", F.col("_prev_src").alias("previous_source_offset"),
        F.unix_millis("timestamp").alias("record_timestamp"),
        F.col("partition").alias("source_partition"), F.col("offset").alias("source_offset"),
        F.col("win.start").alias("window_start_offset"))
    if not with_regressions:
        reg = reg.limit(0)
    return out, reg


def offset_regression_violations(regressions: DataFrame, windows: DataFrame) -> DataFrame:
    """`violations` rows (kind offset_regression) of `offset_commits(...)[1]`: member_ids are the
    owners of the partition in the window's opening GroupMetadata record (decoded with
    coordinator_core, on the regressing rows only), detail/evidence as the pure path words them."""
    from pyspark.sql import functions as F

    from udfs.decode import owners_udf
    from udfs.schemas import TABLE_SCHEMAS

    w = windows.select("group_id", F.col("offset").alias("window_start_offset"), F.col("value").alias("_gm"))
    r = regressions.join(w, ["group_id", "window_start_offset"], "left")
    detail = F.format_string(
        "%s-%d: committed offset %d (commit time %d) after %d (commit time %d) while the group was Stable in "
        "generation %d", "topic", "partition", "offset_value", "commit_timestamp", "previous_offset",
        "previous_commit_timestamp", "generation_id")
    evidence = F.format_string("partition %d offsets %d -> %d", "source_partition", "previous_source_offset",
                               "source_offset")
    out = r.select(
        "group_id", "generation_id", F.lit("offset_regression").alias("kind"), "topic", "partition",
        owners_udf()(F.col("_gm"), F.col("group_id"), F.col("topic"), F.col("partition")).alias("member_ids"),
        detail.alias("detail"), evidence.alias("evidence"), "record_timestamp", "source_partition",
        "source_offset")
    return _conform(out, TABLE_SCHEMAS["violations"])


def _conform(df: DataFrame, schema: StructType) -> DataFrame:
    """Columns of `schema` in its order, atomic types cast to it (nested types are left as built)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    cols = []
    for f in schema.fields:
        nested = isinstance(f.dataType, ArrayType | MapType | StructType)
        cols.append(F.col(f.name) if nested else F.col(f.name).cast(f.dataType).alias(f.name))
    return df.select(*cols)
