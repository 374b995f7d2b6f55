from rtax_tui.cli import main

raise SystemExit(main())
