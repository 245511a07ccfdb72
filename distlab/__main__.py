"""`python -m distlab ...` is the `distlab` command (for machines where only a bare python3 is on hand)."""

import sys

from distlab.core.cli import main

sys.exit(main())
