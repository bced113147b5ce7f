from __future__ import annotations

from coordinator_audit.core.coordinator import GroupState

from .scenario import Ctx


def test_two_members_reach_stable_and_replay_matches() -> None:
    for flavor in ("java", "scala"):
        ctx = Ctx(flavor=flavor)
        ids = ctx.stable_group(2)
        v = ctx.view()
        assert v.state == GroupState.STABLE
        assert set(v.member_ids) == set(ids)
        assert v.generation_id == 1
