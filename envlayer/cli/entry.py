"""The ``envlayer`` console script: ``envlayer exec`` goes to this user's session broker
when it can (:func:`envlayer.cli.broker.client.exec_via_broker`); everything else, and a call
the broker hands back, runs in this process (:func:`envlayer.cli.main`).

Kept apart from both so that neither imports the other: the fast path loads only the
broker's stdlib-only client, the in-process CLI only when it is needed.
"""

from __future__ import annotations

import sys

from envlayer.cli.broker.client import exec_via_broker


def main() -> None:
    """Run the command of ``sys.argv`` and exit with its code."""
    code = exec_via_broker(sys.argv[1:])
    if code is None:
        from envlayer.cli.app import main as in_process

        code = in_process()
    sys.exit(code)
