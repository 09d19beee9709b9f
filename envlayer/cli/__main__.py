"""``python -m envlayer.cli``: the ``envlayer`` command run in this process (no broker)."""

import sys

from envlayer.cli.app import main

sys.exit(main())
