"""`python -m benchmarks.harness [options]`: see `--help`."""

import sys

from benchmarks.harness.cli import main

sys.exit(main())
