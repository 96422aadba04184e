"""`python -m tacc` is the `tacc` command."""

from tacc.cli import entry

entry()
