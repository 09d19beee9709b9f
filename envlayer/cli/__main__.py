"""``python -m envlayer.cli``: the ``envlayer`` command run in this process (no broker)."""

import sys

from envlayer.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
