"""The broker tier on Kafka 3.x (Scala group coordinator, 3.x's default for classic groups): the
same consumers and checks as on 4.x for the eager, static and poll-timeout scenarios."""

from __future__ import annotations

import pytest

from coordinator_audit.jobs.audit import run_audit
from coordinator_audit.jobs.config import load_config
from tests.kafka.cluster import Broker
from tests.kafka.scenarios import run_all
from tests.kafka.truth import assert_tables_match_truth, tables_at

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def live3(tmp_path_factory: pytest.TempPathFactory):
    broker = Broker(tmp_path_factory.mktemp("kafka3"), 3)
    try:
        broker.start()
        yield broker, run_all(broker, ["eager-expiry-leave", "static-rolling-restart", "poll-timeout"])
    finally:
        broker.stop()


def test_the_scala_coordinator_agrees_with_the_consumers(spark, live3, tmp_path) -> None:
    broker, truths = live3
    assert broker.version.startswith("3.")
    cfg = load_config(None, {"input.path": "", "input.kafka_bootstrap": broker.bootstrap,
                             "input.server_log": str(broker.server_log), "output.path": str(tmp_path / "out"),
                             "output.writer": "embedded"})
    summary = run_audit(spark, cfg)
    assert_tables_match_truth(tables_at(spark, summary.locations), truths, broker_account=True)
