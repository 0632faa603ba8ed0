"""`python -m legato.cli ...` runs the legato command line."""
import sys

from .commands import main

sys.exit(main())
