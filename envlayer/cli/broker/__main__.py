"""``python -m envlayer.cli.broker serve ...``: how :mod:`envlayer.cli.broker.spawn` starts a broker."""

import sys

from envlayer.cli.broker.server import main

if __name__ == "__main__":
    sys.exit(main())
