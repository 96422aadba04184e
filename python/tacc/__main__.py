"""`python -m tacc` is the `tacc` command."""

from tacc.cli import main

raise SystemExit(main())
