"""`python -m server` = `electric serve`."""

import sys

from server.cli import main

sys.exit(main())
