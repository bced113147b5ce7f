"""The report at scale, and the screenshots of it in docs/.

    .venv/bin/python -m tools.report_screenshots        # rewrites docs/report-index.png and docs/report-timeline.png

`small_groups_log` writes a log of many small groups through the simulator (each group's membership
runs through the scenario runner and the coordinator port, `coordinator_audit.core.sim.scale`): 1-3
members on one topic of 1-3 partitions, some static, some cooperative, a few with a storm of
restarts; with the duplicate-assignment sample beside it, a violation to show. `open_report` opens
a report in headless Chromium (scripts/browser.sh) and reports console errors and network
requests; the scale test (tests/spark/test_spark_report_scale.py) uses both. The screenshots: the
index of 5,000 such groups with one group opened (docs/report-index.png), and grp-s01 of the real
Kafka 3.9 broker's sample audited with its server.log (docs/report-timeline.png).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator_audit.core.sim.port import partition_for
from coordinator_audit.core.sim.scale import GroupPlan, ScaleConfig, generate
from tools.make_samples import to_table

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"
OFFSETS_PARTITIONS = 4


def small_groups_log(directory: Path, *, groups: int, seed: int = 5) -> Path:
    """`directory` holding the log of `groups` small groups (module docstring) and the
    duplicate-assignment sample, as Kafka-source Parquet files."""
    rng = random.Random(f"small-groups-{seed}")
    plans = []
    for i in range(groups):
        gid = f"app-{i:05d}"
        plans.append(GroupPlan(gid, partition_for(gid, OFFSETS_PARTITIONS), rng.randint(1, 3),
                               ((f"orders-{i:05d}", rng.randint(1, 3)),), rng.random() < 0.2, rng.random() < 0.3,
                               rng.random() < 0.05, rng.randint(0, 360_000)))
    config = ScaleConfig(records=groups * 4, groups=groups, seed=seed, duration_ms=3_600_000,
                         offsets_partitions=OFFSETS_PARTITIONS, max_members=3)
    table = pa.concat_tables(to_table(b.partition, b.offset, b.timestamp_ms, b.key, b.value)
                             for b in generate(config, plans=plans, batch_rows=50_000))
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, directory / "small-groups.parquet")
    shutil.copy(SAMPLES / "sim_bug-duplicate-assignment.parquet", directory / "sim_bug-duplicate-assignment.parquet")
    return directory


def chromium() -> str:
    """The headless Chromium's executable (scripts/browser.sh finds or installs it); RuntimeError with its reason."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "browser.sh")], capture_output=True, text=True, check=False)
    path = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else ""
    if not path:
        raise RuntimeError(f"no headless Chromium: scripts/browser.sh failed ({proc.stderr.strip()[-300:]})")
    return path


@dataclass
class PageVisit:
    """What opening a report showed: console errors and page errors, requests beyond the file, the
    opened group's drawn bars and markers."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    index_rows: int = 0
    bars: int = 0
    markers: int = 0
    legend: str = ""
    section_text: str = ""
    search_rows: int = -1
    generation_numbers: list[str] = field(default_factory=list)
    """The labels on the timeline's generations band."""
    labels: dict[str, str] = field(default_factory=dict)
    """Full member id (on hover) -> the short label shown, in the group's tables."""
    index_whatif: dict[str, str] = field(default_factory=dict)
    """Group -> its what-if cell in the index (only when the report holds a `whatif` table)."""
    whatif_rows: list[dict[str, Any]] = field(default_factory=list)
    """The opened group's what-if table, one entry per configuration (actual first): `configuration`,
    the row's `class`, its cells' `text`, and `costs`: cost column -> [text shown, data-value, data-diff]."""


def open_report(executable: str, page_file: Path, *, group: str, search: str | None = None,
                index_shot: Path | None = None, timeline_shot: Path | None = None) -> PageVisit:
    """Opens `page_file` in headless Chromium, `search`es the index (when given), opens `group` from
    its index link and waits for its timeline; screenshots of the page (`index_shot`) and of the
    group's timeline (`timeline_shot`) when asked."""
    from playwright.sync_api import sync_playwright

    visit = PageVisit()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.on("console", lambda m: visit.errors.append(f"console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: visit.errors.append(f"page error: {e}"))
            page.on("request", lambda r: visit.requests.append(r.url)
                    if not r.url.startswith(("file:", "data:", "blob:")) else None)
            page.goto(page_file.as_uri(), wait_until="load")
            visit.index_rows = page.locator("#index tbody tr").count()
            visit.index_whatif = dict(page.locator("#index tbody tr:has(td.whatif)").evaluate_all(
                "rows => rows.map(r => [r.cells[0].textContent, r.querySelector('td.whatif').textContent])"))
            if search is not None:
                page.fill("#search", search)
                visit.search_rows = page.locator("#index tbody tr").count()
                page.fill("#search", "")
            page.click(f"#index a[href='#group={quote(group, safe='')}']")
            section = page.locator("#group-view section.group")
            section.locator(".main-svg").first.wait_for(timeout=60_000)
            visit.bars = section.locator(".barlayer .point").count()
            visit.markers = section.locator(".scatterlayer .point").count()
            visit.legend = section.locator(".legend").first.text_content() or ""
            visit.section_text = section.inner_text()
            visit.generation_numbers = [t.strip() for t in section.locator(".barlayer .bartext").all_text_contents()]
            visit.labels = dict(section.locator("abbr[title]").evaluate_all(
                "els => els.map(e => [e.getAttribute('title'), e.textContent])"))
            visit.whatif_rows = section.locator("table.whatif tr[data-configuration]").evaluate_all(
                "rows => rows.map(r => ({configuration: r.dataset.configuration, class: r.className, "
                "text: Array.from(r.cells).map(c => c.textContent), costs: Object.fromEntries("
                "Array.from(r.querySelectorAll('td[data-cost]')).map(c => [c.dataset.cost, "
                "[c.textContent, c.dataset.value, c.dataset.diff === undefined ? null : c.dataset.diff]]))}))")
            if index_shot is not None:
                page.evaluate("for (const e of document.querySelectorAll('.scroll')) e.scrollTop = 0; "
                              "window.scrollTo(0, 0)")
                page.screenshot(path=str(index_shot), full_page=False)
            if timeline_shot is not None:
                section.locator(".timeline").scroll_into_view_if_needed()
                section.locator(".timeline").screenshot(path=str(timeline_shot))
        finally:
            browser.close()
    return visit


def _audit(log: Path, out: Path, *, server_log: Path | None = None) -> None:
    cmd = [sys.executable, "-m", "coordinator_audit.jobs.audit", "--input", str(log), "--output", str(out),
           "--master", "local[2]", *(["--server-log", str(server_log)] if server_log else [])]
    subprocess.run(cmd, check=True, cwd=ROOT)


def _report(tables: Path, page: Path, *groups: str) -> None:
    from coordinator_audit.jobs import report

    if report.main(["--tables", str(tables), "--out", str(page), *(a for g in groups for a in ("--group", g))]) != 0:
        raise RuntimeError(f"the report of {tables} failed")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools.report_screenshots", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=5000, help="small groups in the index's report (%(default)s)")
    args = p.parse_args(argv)
    executable = chromium()
    with tempfile.TemporaryDirectory(prefix="report-screenshots-") as tmp:
        work = Path(tmp)
        _audit(small_groups_log(work / "log", groups=args.groups), work / "tables")
        _report(work / "tables", work / "index.html")
        visit = open_report(executable, work / "index.html", group="sim-bug-duplicate-assignment",
                            index_shot=ROOT / "docs" / "report-index.png")
        _audit(SAMPLES / "real_broker_3_9_0.parquet", work / "broker",
               server_log=SAMPLES / "real_broker_3_9_0.server.log")
        _report(work / "broker", work / "broker.html")
        visit2 = open_report(executable, work / "broker.html", group="grp-s01",
                             timeline_shot=ROOT / "docs" / "report-timeline.png")
    problems = visit.errors + visit.requests + visit2.errors + visit2.requests
    print("docs/report-index.png, docs/report-timeline.png written" + (f"; problems: {problems}" if problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
