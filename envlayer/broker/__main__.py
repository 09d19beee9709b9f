"""``python -m envlayer.broker serve ...``: how :mod:`envlayer.broker.spawn` starts a broker."""

import sys

from envlayer.broker.server import main

if __name__ == "__main__":
    sys.exit(main())
