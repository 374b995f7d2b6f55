"""`python -m rtax_tui`: the `rtax` command."""

from rtax_tui.commands import main

raise SystemExit(main())
