"""The README says what the code does: its two commands are the ones CI and the scripts run; every
output table is named in its table list, and every column is documented in docs/tables.md."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from coordinator_audit.core.audit.rows import ROW_TYPES

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text(encoding="utf-8")
TABLES = (ROOT / "docs" / "tables.md").read_text(encoding="utf-8")


def _two_commands() -> list[str]:
    section = README.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the Two commands section has a bash block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_exactly_two_commands_and_ci_runs_the_test_command() -> None:
    run, test = _two_commands()
    assert run == "bash scripts/run.sh"
    assert test == "bash scripts/test.sh"
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^bash scripts/test\.sh\s*$", ci, re.M), ".ci/run calls the README's test command"
    for script in ("run.sh", "test.sh"):
        text = (ROOT / "scripts" / script).read_text()
        assert "bash scripts/setup.sh" in text, f"{script} sets everything up first"


def test_every_output_table_is_in_the_readme_list() -> None:
    section = README.split("## The tables", 1)[1].split("\n## ", 1)[0]
    for table in [*ROW_TYPES, "runs", "group_state", "whatif"]:
        assert f"| `{table}` |" in section, f"README: table {table} is not in the list of tables"


def test_every_output_column_is_documented() -> None:
    for table, cls in ROW_TYPES.items():
        section = TABLES.split(f"**`{table}`**", 1)
        assert len(section) == 2, f"docs/tables.md documents table {table}"
        text = section[1].split("**`", 1)[0]
        for field in dataclasses.fields(cls):
            assert re.search(rf"\b{field.name}\b", text), f"docs/tables.md: column {table}.{field.name} is not described"


def test_runs_columns_are_documented() -> None:
    from coordinator_audit.udfs.schemas import RUNS_SCHEMA  # pyspark types only; no session

    text = TABLES.split("**`runs`**", 1)[1].split("##", 1)[0]
    for name in RUNS_SCHEMA.fieldNames():
        assert name in text, f"docs/tables.md: column runs.{name} is not described"


def test_time_companions_and_input_columns_are_documented() -> None:
    from coordinator_audit.udfs.schemas import TIME_COMPANIONS  # pyspark types only; no session

    for table, pairs in TIME_COMPANIONS.items():
        text = TABLES.split(f"**`{table}`**", 1)[1].split("**`", 1)[0]
        for _, companion in pairs:
            assert re.search(rf"`?\b{companion}\b", text), f"docs/tables.md: column {table}.{companion} is not described"


def test_whatif_columns_are_documented() -> None:
    from coordinator_audit.jobs.whatif import WHATIF_SCHEMA

    text = TABLES.split("**`whatif`**", 1)[1]
    for name in WHATIF_SCHEMA.names:
        assert re.search(rf"\b{name}\b", text), f"docs/tables.md: column whatif.{name} is not described"
