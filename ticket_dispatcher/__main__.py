from ticket_dispatcher.cli import main

raise SystemExit(main())
