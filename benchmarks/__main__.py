"""`python -m benchmarks`: the benchmark (`benchmarks.harness.main`)."""

import sys

from benchmarks.harness import main

sys.exit(main())
