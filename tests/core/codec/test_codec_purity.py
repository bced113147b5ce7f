"""coordinator_audit.core is standard library only: importing every one of its modules in a fresh
interpreter loads none of pyspark, pandas, deltalake, numpy or pyarrow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
BANNED = ("pyspark", "pandas", "deltalake", "numpy", "pyarrow")

SCRIPT = """
import importlib, json, pkgutil, sys
import coordinator_audit.core
names = [m.name for m in pkgutil.walk_packages(coordinator_audit.core.__path__, "coordinator_audit.core.")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted(sys.modules)}))
"""


def test_coordinator_core_imports_no_heavy_dependency() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert {"coordinator_audit.core.wire", "coordinator_audit.core.records", "coordinator_audit.core.consumer_protocol"} <= set(
        report["modules"])
    leaked = [m for m in report["loaded"] if m.split(".")[0] in BANNED]
    assert leaked == []
