"""Codec test support shared by the codec and audit tests: the record round trip, and the wire's
signed integer types as Hypothesis strategies."""

from __future__ import annotations

from hypothesis import strategies as st

from coordinator_audit.core.records import CoordinatorRecord, decode, encode

INT8 = st.integers(-(2**7), 2**7 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def round_trip(rec: CoordinatorRecord) -> CoordinatorRecord:
    """Encodes `rec`, decodes the bytes (as a transaction marker when `rec` is one), asserts that the
    decoded record encodes to the same bytes, and returns it."""
    key, value = encode(rec)
    back = decode(key, value, is_control=rec.is_control)
    assert encode(back) == (key, value)
    return back


def assert_record_round_trip(rec: CoordinatorRecord) -> None:
    """`round_trip`, and the decoded record equals `rec`."""
    assert round_trip(rec) == rec
