"""Memory figures of the benchmark: a sampler of the driver JVM's and its Python workers' RSS (read
from `/proc` while a Spark step runs), and one group's offset commits streamed through the
pure-Python audit in a process of its own (its peak RSS)."""

from __future__ import annotations

import collections
import os
import resource
import threading
import time
from collections.abc import Iterator
from typing import Any

from coordinator_audit.core.audit import GroupAuditor
from coordinator_audit.core.sim.runner import run_scenario
from coordinator_audit.core.sim.scale import (
    GroupPlan,
    ScaleConfig,
    metadata_scenario,
    offset_commit_key,
    offset_commit_value,
)

__all__ = ["MemorySampler", "descendants", "proc_children", "single_group_memory"]


def proc_children() -> dict[int, list[int]]:
    """Every process's children, from /proc: parent pid -> child pids."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    """`pid`'s children, their children and so on (`children`: `proc_children()`)."""
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _status(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            return dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return {}


def _kib(status: dict[str, str], field: str) -> int:
    v = status.get(field, "0 kB").split()
    return int(v[0]) if v else 0


class MemorySampler(threading.Thread):
    """Samples the RSS of the driver JVM (a child of this process) and of its Python workers."""

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.interval = interval
        self.stop_event = threading.Event()
        self.jvm_pid: int | None = None
        self.worker_peak_kib: dict[int, int] = {}
        self.worker_hwm_kib: dict[int, int] = {}
        self.workers_sum_peak_kib = 0
        self.jvm_peak_kib = 0
        self.jvm_hwm_kib = 0
        self.samples = 0
        self.reset_ok = False

    def _find(self) -> tuple[int | None, list[int]]:
        children = proc_children()
        jvm = next((p for p in descendants(os.getpid(), children)
                    if _status(p).get("Name", "").strip() == "java"), None)
        if jvm is None:
            return None, []
        py = [p for p in descendants(jvm, children) if _status(p).get("Name", "").strip().startswith("python")]
        return jvm, py

    def reset_peaks(self) -> None:
        """Resets VmHWM of the JVM and the existing workers (Linux clear_refs 5)."""
        jvm, workers = self._find()
        ok = jvm is not None
        for pid in ([jvm] if jvm else []) + workers:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                ok = False
        self.reset_ok = ok

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.interval)
        self.sample()

    def sample(self) -> None:
        jvm, workers = self._find()
        self.samples += 1
        if jvm is not None:
            self.jvm_pid = jvm
            s = _status(jvm)
            self.jvm_peak_kib = max(self.jvm_peak_kib, _kib(s, "VmRSS"))
            self.jvm_hwm_kib = max(self.jvm_hwm_kib, _kib(s, "VmHWM"))
        total = 0
        for pid in workers:
            s = _status(pid)
            rss = _kib(s, "VmRSS")
            total += rss
            self.worker_peak_kib[pid] = max(self.worker_peak_kib.get(pid, 0), rss)
            self.worker_hwm_kib[pid] = max(self.worker_hwm_kib.get(pid, 0), _kib(s, "VmHWM"))
        self.workers_sum_peak_kib = max(self.workers_sum_peak_kib, total)

    def stop(self) -> dict[str, Any]:
        self.stop_event.set()
        self.join()
        mib = 1024.0
        return {
            "samples": self.samples, "interval_s": self.interval, "peaks_reset_at_start": self.reset_ok,
            "python_workers_seen": len(self.worker_peak_kib),
            "python_worker_peak_rss_mib": round(max(self.worker_peak_kib.values(), default=0) / mib, 1),
            "python_worker_peak_hwm_mib": round(max(self.worker_hwm_kib.values(), default=0) / mib, 1),
            "python_workers_sum_peak_rss_mib": round(self.workers_sum_peak_kib / mib, 1),
            "driver_jvm_peak_rss_mib": round(self.jvm_peak_kib / mib, 1),
            "driver_jvm_hwm_mib": round(self.jvm_hwm_kib / mib, 1),
        }


def single_group_memory(commits: int) -> dict[str, Any]:
    """One group (a real simulated head: 3 members on 64 partitions) then `commits` offset commits
    streamed from a generator through `GroupAuditor`; peak RSS of this process."""
    config = ScaleConfig(records=commits, groups=1)
    plan = GroupPlan("bench-single-group", 0, 3, (("orders", 64),), False, True, False, 0)
    head = run_scenario(metadata_scenario(plan, config)).full_records
    keys = [offset_commit_key(plan.group_id, "orders", p) for p in range(64)]
    start = len(head)
    t_end = max(r.timestamp_ms for r in head)

    def stream() -> Iterator[tuple[int, int, int, bytes, bytes | None]]:
        for i in range(commits):
            ts = t_end + i
            yield (0, start + i, ts, keys[i % 64], offset_commit_value(i // 64, ts))

    auditor = GroupAuditor(plan.group_id)
    collections.deque(auditor.feed((r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in head), maxlen=0)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    collections.deque(auditor.feed(stream()), maxlen=0)
    rows = auditor.finish()
    elapsed = time.perf_counter() - t0
    if auditor.counts.offset_commits != commits:
        raise AssertionError(f"single-group run: {auditor.counts.offset_commits} commits audited, {commits} fed")
    return {"commits": commits, "head_records": len(head), "output_rows": len(rows),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "baseline_rss_mib": round(baseline, 1), "seconds": elapsed, "commits_per_s": commits / elapsed}
