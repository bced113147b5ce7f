"""The broker's server.log account attached to `generations` (coordinator_audit.udfs.broker_log)."""

from __future__ import annotations

from pathlib import Path

from coordinator_audit.udfs.broker_log import attach_broker_account, broker_account_frame
from tests.core.broker.test_broker_log import JAVA_LINES


def test_the_account_of_a_classic_generation_is_not_given_to_a_consumer_epoch_of_the_same_number(
        spark, tmp_path: Path) -> None:
    """A group converted online keeps its numbers: classic generation 1 and, after the conversion,
    consumer-group epoch 1 are two generations; the classic-group lines of the server.log account
    for the classic one only."""
    log = tmp_path / "server.log"
    log.write_text("\n".join(JAVA_LINES) + "\n")
    generations = spark.createDataFrame([("g1", 1, "classic"), ("g1", 1, "consumer")],
                                        "group_id string, generation_id int, group_type string")
    rows = attach_broker_account(generations, broker_account_frame(spark, str(log))).collect()
    by_type = {r["group_type"]: r for r in rows}
    assert len(rows) == 2
    assert by_type["classic"]["broker_cause"] == "member_joined"
    assert by_type["classic"]["broker_reason"].startswith("Adding new member c1-0d8c")
    assert by_type["consumer"]["broker_cause"] is None and by_type["consumer"]["broker_reason"] is None
