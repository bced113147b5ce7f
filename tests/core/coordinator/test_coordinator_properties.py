"""Hypothesis: random valid client behaviour never raises and keeps the invariants.

Clients behave like real consumers: at most one JoinGroup/SyncGroup in flight, heartbeats at any time,
no LeaveGroup or commit while a join/sync is parked. Invariants checked after every step: Stable or
CompletingRebalance implies the leader is a member; the generation never decreases; replaying the
written records gives the live persisted state (the scenario context checks it); and once time passes
every deadline, every parked request has been answered (or abandoned as Kafka abandons it).
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from coordinator_audit.core.coordinator import GroupState
from coordinator_audit.core.protocol import Errors, JoinGroupResponse, MemberIdentity, SyncGroupResponse

from .scenario import Ctx, sub

PROTOCOL_CHOICES = (
    (("range", sub("t")),),
    (("range", sub("t")), ("roundrobin", sub("t"))),
    (("roundrobin", sub("t", "u")), ("range", sub("t", "u"))),
)


@dataclass
class Client:
    instance: str | None
    member_id: str = ""
    generation: int = -1
    is_leader: bool = False
    members: tuple[str, ...] = ()
    in_flight: int | None = None
    protocols: int = 0
    synced: int = -1


def _absorb(ctx: Ctx, clients: list[Client], parked: set[int]) -> None:
    res = ctx.last
    assert res is not None
    for corr in res.dropped:
        parked.discard(corr)
    for resp in res.responses:
        parked.discard(resp.correlation_id)
        owner = next((c for c in clients if c.in_flight == resp.correlation_id), None)
        if owner is None:
            continue
        owner.in_flight = None
        if isinstance(resp, JoinGroupResponse):
            if resp.error_code == Errors.NONE:
                owner.member_id, owner.generation = resp.member_id, resp.generation_id
                owner.is_leader = resp.leader == resp.member_id
                owner.members = tuple(m.member_id for m in resp.members)
            elif resp.error_code == Errors.MEMBER_ID_REQUIRED:
                owner.member_id = resp.member_id
            else:
                owner.member_id, owner.generation = "", -1
        elif isinstance(resp, SyncGroupResponse):
            if resp.error_code != Errors.NONE:
                owner.generation = -1
            else:
                owner.synced = owner.generation


def _send(ctx: Ctx, client: Client, parked: set[int], call) -> None:  # type: ignore[no-untyped-def]
    res = call()
    corr = ctx._corr
    if all(r.correlation_id != corr for r in res.responses):
        parked.add(corr)
        client.in_flight = corr


def _check(ctx: Ctx, generations: dict[str, int]) -> None:
    for gid in ctx.coord.group_ids():
        v = ctx.coord.group(gid)
        assert v is not None
        if v.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert v.leader_id in v.member_ids, (v.state, v.leader_id, v.member_ids)
        assert v.generation_id >= generations.get(gid, 0)
        generations[gid] = v.generation_id
        assert v.num_members_awaiting_join == sum(m.awaiting_join for m in v.members)
    for gid in list(generations):
        if gid not in ctx.coord.group_ids():
            del generations[gid]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flavor=st.sampled_from(["java", "scala"]), data=st.data())
def test_random_client_behaviour_keeps_invariants(flavor: str, data: st.DataObject) -> None:
    ctx = Ctx(flavor=flavor)
    clients = [Client(None), Client(None), Client("s1"), Client("s2")]
    parked: set[int] = set()
    generations: dict[str, int] = {}
    steps = data.draw(st.integers(5, 60), label="steps")
    for _ in range(steps):
        c = clients[data.draw(st.integers(0, len(clients) - 1), label="client")]
        action = data.draw(st.sampled_from(["progress"] * 6 + ["join", "sync", "heartbeat", "leave", "commit",
                                                                "advance", "advance"]), label="action")
        busy = c.in_flight is not None
        if action == "progress":  # what a healthy consumer does next
            if busy or (c.member_id and c.generation > 0 and c.synced == c.generation):
                action = "heartbeat" if c.member_id and c.generation > 0 else "advance"
            elif c.member_id and c.generation > 0:
                action = "sync"
            else:
                action = "join"
        if action == "advance":
            ctx.advance(data.draw(st.sampled_from([0, 100, 1_000, 3_000, 5_000, 20_000]), label="ms"))
        elif action == "join" and not busy:
            if data.draw(st.booleans(), label="new protocols"):
                c.protocols = data.draw(st.integers(0, len(PROTOCOL_CHOICES) - 1), label="protocols")
            _send(ctx, c, parked, lambda c=c: ctx.join(
                c.member_id, instance=c.instance, protocols=PROTOCOL_CHOICES[c.protocols],
                version=data.draw(st.sampled_from([5, 9] if c.instance else [3, 9]), label="version")))
        elif action == "sync" and not busy and c.member_id and c.generation > 0:
            assignments = tuple((m, f"{m}@{c.generation}".encode()) for m in c.members) if c.is_leader else ()
            protocol = ctx.coord.group("g").protocol_name if ctx.coord.group("g") else None
            _send(ctx, c, parked, lambda c=c, a=assignments, p=protocol: ctx.sync(
                c.member_id, c.generation, a, instance=c.instance, protocol_name=p))
        elif action == "heartbeat" and c.member_id:
            ctx.heartbeat(c.member_id, c.generation, instance=c.instance)
        elif action == "leave" and not busy and (c.member_id or c.instance):
            ctx.leave(MemberIdentity(c.member_id, c.instance))
            c.member_id, c.generation = "", -1
        elif action == "commit" and not busy:
            ctx.commit(member_id=c.member_id, generation=c.generation if c.member_id else -1, instance=c.instance)
        else:
            ctx.advance(0)
        _absorb(ctx, clients, parked)
        _check(ctx, generations)
        view = ctx.coord.group("g")
        if view is not None:
            event(f"reached {view.state}")

    for _ in range(2000):
        if not parked:
            break
        deadline = ctx.coord.next_deadline()
        assert deadline is not None, f"parked requests {parked} but no timer left"
        ctx.at(max(deadline, ctx.now))
        _absorb(ctx, clients, parked)
        _check(ctx, generations)
    assert not parked, f"requests never answered: {parked}"
    event(f"max generation {max(generations.values(), default=0) // 2 * 2}+")
    event(f"records written >= {len(ctx.records) // 5 * 5}")
