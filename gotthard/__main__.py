from gotthard.cli import main

raise SystemExit(main())
