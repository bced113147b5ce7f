"""partition_for (GroupCoordinatorService#partitionFor): Utils.abs(String#hashCode) % partitions, over UTF-16
code units."""

from __future__ import annotations

import pytest

from coordinator_audit.core.errors import ConfigError
from coordinator_audit.core.jhash import java_string_hashcode
from coordinator_audit.core.records import partition_for


@pytest.mark.parametrize(("group", "hash_code", "partition"), [
    ("my-group", -1906497762, 12),
    ("console-consumer-12345", 158455506, 6),
    ("test", 3556498, 48),
    ("", 0, 0),
])
def test_spec_table_checked_on_a_jvm(group: str, hash_code: int, partition: int) -> None:
    assert java_string_hashcode(group) == hash_code
    assert partition_for(group) == partition


def test_non_bmp_group_id_counts_two_utf16_units() -> None:
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16: h = 31 * 0xD83D + 0xDE00
    assert java_string_hashcode("\U0001f600") == 31 * 0xD83D + 0xDE00 == 1772899
    assert partition_for("\U0001f600") == 1772899 % 50 == 49
    # hashing code points instead (ord = 0x1F600) would give another partition
    assert 0x1F600 % 50 != 49


@pytest.mark.parametrize("group", ["polygenelubricants", "GydZG_", "DESIGNING WORKHOUSES"])
def test_hash_code_min_value_maps_to_partition_zero(group: str) -> None:
    """Strings whose hashCode is Integer.MIN_VALUE: Utils.abs gives 0, where Math.abs would stay
    negative (and Python's abs would give 2147483648 % 50 = 48)."""
    assert java_string_hashcode(group) == -(2**31)
    assert partition_for(group) == 0
    assert partition_for(group, 7) == 0


def test_other_partition_counts() -> None:
    assert partition_for("my-group", 1) == 0
    assert partition_for("my-group", 200) == 1906497762 % 200
    with pytest.raises(ConfigError, match="positive int"):
        partition_for("my-group", 0)
