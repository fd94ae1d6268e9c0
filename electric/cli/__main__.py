"""`python -m electric.cli ...` is `electric ...`."""

import sys

from electric.cli import main

sys.exit(main())
