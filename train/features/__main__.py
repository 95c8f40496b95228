"""`python -m draftsmith.train.features RECIPE --output DIR` (or under `accelerate launch -m`)."""

import sys

from draftsmith.train.features.cli import main

if __name__ == "__main__":
    sys.exit(main())
