from rtax_tui.commands import main

raise SystemExit(main())
