"""``python -m controller.policy schema | check FILE...``."""

from controller.policy.schema import main

raise SystemExit(main())
