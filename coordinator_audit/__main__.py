"""`python -m coordinator_audit SUBCOMMAND ...`: the `coordinator-audit` command (`coordinator_audit.cli`)."""

import sys

from coordinator_audit.cli import main

sys.exit(main())
