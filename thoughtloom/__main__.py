"""`python -m thoughtloom` runs the `loom` command."""

import sys

from .cli.main import main

sys.exit(main())
