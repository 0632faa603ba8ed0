"""The `legato` command line: `commands` (the parser and the commands), `model` (how a
command names a model and a backend), `kit` (`legato init`, `legato check-backend`),
`validate`, `recompose`, `show` and `progress` (progress lines on a terminal)."""
from .commands import main

__all__ = ["main"]
