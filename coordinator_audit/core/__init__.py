"""coordinator-audit's pure-Python core: the `__consumer_offsets` codec, the consumer protocol,
a port of Kafka's classic group coordinator, the consumer clients and assignors, the scenario
simulator and the audit. Standard library only: never imports pyspark, pandas or deltalake."""

from __future__ import annotations

__version__ = "0.1.0"
