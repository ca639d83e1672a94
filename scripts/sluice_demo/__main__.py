"""``python -m sluice_demo`` (from scripts/): the demo."""

import sys

from .cli import main

sys.exit(main())
