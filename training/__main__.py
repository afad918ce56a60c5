"""`python -m training ...` is `tfformer-train ...`."""

import sys

from training.cli import main

sys.exit(main())
