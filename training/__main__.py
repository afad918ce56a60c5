"""`python -m tfformer.training ...` is `tfformer-train ...`."""

import sys

from tfformer.training.commands.train import main

sys.exit(main())
