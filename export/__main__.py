"""`python -m export` is `tfformer-export`."""

import sys

from export.cli import main

sys.exit(main())
