"""Scoring audit rows against ground truth: per-generation cause agreement, per-cause confusion and
per-kind violation hits. Used with the real broker sample's truth.json and the simulator's Truth.

Definitions:
* a generation *agrees* when the audit's primary cause for it is one of the truth's causes for it
  (after `ALIASES`), or when neither side has a cause for it;
* `confusion[(truth, audit)]` counts generations by the truth's first cause and the audit's primary;
* `per_cause[c]` counts, over generations, c in both (tp), only in the audit (fp), only in the truth (fn);
* violations are matched on (generation_id, kind): `per_kind[k]` has tp/fp/fn the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coordinator_audit.core.audit import RebalanceCauseRow, ViolationRow

ALIASES = {"member_joined_after_empty": "member_joined"}


@dataclass
class Score:
    generations: int = 0
    agree: int = 0
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    per_cause: dict[str, Counter[str]] = field(default_factory=dict)
    per_kind: dict[str, Counter[str]] = field(default_factory=dict)
    mismatches: list[tuple[Any, list[str], list[str], str | None]] = field(default_factory=list)

    def add(self, other: Score) -> None:
        self.generations += other.generations
        self.agree += other.agree
        self.confusion.update(other.confusion)
        for table, mine in ((other.per_cause, self.per_cause), (other.per_kind, self.per_kind)):
            for k, c in table.items():
                mine.setdefault(k, Counter()).update(c)
        self.mismatches.extend(other.mismatches)

    @property
    def agreement(self) -> float:
        return self.agree / self.generations if self.generations else 1.0

    def report(self) -> str:
        lines = [f"generations agreeing: {self.agree}/{self.generations} ({100 * self.agreement:.1f}%)"]
        for c in sorted(self.per_cause):
            n = self.per_cause[c]
            lines.append(f"  cause {c:40s} tp={n['tp']:3d} fp={n['fp']:3d} fn={n['fn']:3d}")
        for k in sorted(self.per_kind):
            n = self.per_kind[k]
            lines.append(f"  violation {k:36s} tp={n['tp']:3d} fp={n['fp']:3d} fn={n['fn']:3d}")
        for (t, a), n in sorted(self.confusion.items()):
            if t != a:
                lines.append(f"  confused: truth {t} -> audit {a}: {n}")
        return "\n".join(lines)


def score(rows: Iterable[Any], truth_causes: Mapping[int | None, Sequence[str]],
          truth_violations: Iterable[tuple[int | None, str]] = ()) -> Score:
    """Scores one group's audit rows against its truth (causes by generation, (generation, kind) pairs)."""
    audit: dict[int | None, list[str]] = {}
    primary: dict[int | None, str] = {}
    found: set[tuple[int | None, str]] = set()
    for r in rows:
        if isinstance(r, RebalanceCauseRow):
            audit.setdefault(r.generation_id, []).append(r.cause)
            if r.is_primary:
                primary[r.generation_id] = r.cause
        elif isinstance(r, ViolationRow):
            found.add((r.generation_id, r.kind))
    s = Score()
    truth = {g: [ALIASES.get(c, c) for c in cs] for g, cs in truth_causes.items()}
    for g in sorted(set(truth) | set(audit), key=lambda x: (x is None, x or 0)):
        t, a = truth.get(g, []), audit.get(g, [])
        s.generations += 1
        ok = primary.get(g) in t or (not t and not a)
        s.agree += ok
        s.confusion[(t[0] if t else "-", primary.get(g, "-"))] += 1
        for c in set(t) | set(a):
            s.per_cause.setdefault(c, Counter())["tp" if c in t and c in a else "fn" if c in t else "fp"] += 1
        if not ok or set(t) != set(a):
            s.mismatches.append((g, t, sorted(set(a)), primary.get(g)))
    expected = set(truth_violations)
    for g, k in expected | found:
        s.per_kind.setdefault(k, Counter())["tp" if (g, k) in expected and (g, k) in found
                                            else "fn" if (g, k) in expected else "fp"] += 1
    return s


@dataclass
class PrimaryScore:
    """Agreement on each generation's primary cause *and* the member it names."""

    generations: int = 0
    agree: int = 0
    mismatches: list[tuple[str, Any, Any, Any]] = field(default_factory=list)

    def add(self, other: PrimaryScore) -> None:
        self.generations += other.generations
        self.agree += other.agree
        self.mismatches.extend(other.mismatches)

    @property
    def agreement(self) -> float:
        return self.agree / self.generations if self.generations else 1.0

    def report(self) -> str:
        lines = [f"primary cause and member agreeing: {self.agree}/{self.generations} ({100 * self.agreement:.2f}%)"]
        lines += [f"  {name} generation {g}: truth {t} audit {a}" for name, g, t, a in self.mismatches]
        return "\n".join(lines)


def _lives(rows: Iterable[Any]) -> dict[tuple[int, int | None], tuple[str, str | None]]:
    """(life, generation) -> (cause, member) of the primary rows, in log order; a new life of the
    group starts after each tombstone (generation ids start again)."""
    out: dict[tuple[int, int | None], tuple[str, str | None]] = {}
    life = 0
    for r in rows:
        if r.is_primary:
            out[(life, r.generation_id)] = (r.cause, r.member_id)
        if r.cause == "group_deleted":
            life += 1
    return out


def score_primary(name: str, rows: Iterable[Any], truth_causes: Iterable[Any]) -> PrimaryScore:
    """Scores the audit's primary rows (`is_primary`) against the truth's (`CauseRow.is_primary`),
    generation by generation: both the cause and the member must be equal."""
    audit = _lives(r for r in rows if isinstance(r, RebalanceCauseRow))
    truth = _lives(truth_causes)
    s = PrimaryScore()
    for k in sorted(set(audit) | set(truth), key=lambda k: (k[0], k[1] is None, k[1] or 0)):
        t, a = truth.get(k), audit.get(k)
        s.generations += 1
        if t == a:
            s.agree += 1
        else:
            s.mismatches.append((name, k[1], t, a))
    return s
