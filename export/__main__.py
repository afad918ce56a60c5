"""`python -m tfformer.export` is `tfformer-export`."""

import sys

from tfformer.export.cli import main

sys.exit(main())
