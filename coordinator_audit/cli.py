"""The `coordinator-audit` command: one subcommand per tool, each the `main(argv)` of its module.

    coordinator-audit run --input data/samples --output out/delta     (coordinator_audit.jobs.audit)
    coordinator-audit query --tables out/delta worst                  (coordinator_audit.jobs.query)
    coordinator-audit report --tables out/delta --out report.html     (coordinator_audit.jobs.report)
    coordinator-audit compare out/nights out/one-run                  (coordinator_audit.jobs.compare)
    coordinator-audit whatif --tables out/delta --sweep               (coordinator_audit.jobs.whatif)

`python -m coordinator_audit ...` is the same command. A subcommand's module is imported only when
it runs, so `query`, `report` and `compare` work without Spark, and a subcommand whose optional
dependencies are missing says which extra to install (`EXTRAS`) instead of a traceback. A new
subcommand is one entry of `SUBCOMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["EXIT_CODES", "EXTRAS", "PROG", "SUBCOMMANDS", "Subcommand", "cli", "main"]

PROG = "coordinator-audit"

EXIT_CODES = """exit status:
  0  success
  1  failure: the run (or the answer) failed after it started, e.g. a Spark error or unreadable tables;
     `compare`: the outputs differ; `query owner`: no owner known at that time
  2  usage error or refusal, found before any work where possible: a bad flag or config value, a
     missing input, a refused window or output, a run id already used, a missing optional dependency"""
"""The exit codes of every subcommand (shown in each `--help`)."""


@dataclass(frozen=True, slots=True)
class Subcommand:
    """A subcommand: the module whose `main(argv) -> int` it runs, and its one-line help."""

    module: str
    help: str


SUBCOMMANDS: dict[str, Subcommand] = {
    "run": Subcommand("coordinator_audit.jobs.audit", "audit __consumer_offsets records into Delta tables"),
    "query": Subcommand("coordinator_audit.jobs.query", "answer an operator's question from the tables (no Spark)"),
    "report": Subcommand("coordinator_audit.jobs.report", "write the tables' HTML report (no Spark)"),
    "compare": Subcommand("coordinator_audit.jobs.compare", "compare two outputs table by table (no Spark)"),
    "whatif": Subcommand("coordinator_audit.jobs.whatif",
                         "replay the groups' history under another configuration: what it would have cost (no Spark)"),
}
"""Every subcommand, in the order `--help` lists them."""

EXTRAS: dict[str, str] = {
    "pyspark": "spark",
    "pandas": "spark",
    "delta": "delta-spark",
    "grpc": "connect",
    "google": "connect",
    "zstandard": "connect",
}
"""The extra of `coordinator-audit` that installs each optional top-level module."""


def missing_extra(exc: ModuleNotFoundError, subcommand: str) -> str | None:
    """The one line saying which extra installs the module `exc` could not import (None: no extra does)."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return (f"{PROG} {subcommand}: needs the Python module {top!r}, which is not installed in {sys.executable}; "
            f"install it with: pip install 'coordinator-audit[{extra}]' (on a cluster that has its own Spark, run "
            f"with that Spark's Python instead)")


def _parser() -> argparse.ArgumentParser:
    width = max(map(len, SUBCOMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {s.help}" for name, s in SUBCOMMANDS.items())
    p = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES,
        description="The history of Kafka consumer groups, rebuilt from __consumer_offsets.\n\n"
                    f"subcommands ({PROG} SUBCOMMAND --help for each one's options):\n{listing}")
    p.add_argument("subcommand", choices=list(SUBCOMMANDS), metavar="SUBCOMMAND", help=", ".join(SUBCOMMANDS))
    p.add_argument("args", nargs=argparse.REMAINDER, help="the subcommand's arguments")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `coordinator-audit SUBCOMMAND ARGS`: the subcommand's exit status (`EXIT_CODES`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if not args or args[0] in ("-h", "--help"):
        parser.print_help(sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] not in SUBCOMMANDS:
        try:
            parser.parse_args(args[:1])  # argparse's own message (and exit status 2)
        except SystemExit as exc:
            return int(exc.code or 0)
    name = args[0]
    try:
        run: Callable[[list[str]], int] = importlib.import_module(SUBCOMMANDS[name].module).main
    except ModuleNotFoundError as exc:
        line = missing_extra(exc, name)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    try:
        return run(args[1:])
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)


def cli() -> None:
    """The `coordinator-audit` console command (installed with the package)."""
    sys.exit(main())
