"""envlayer's Daytona backend (distribution ``envlayer-daytona``).

The entry point ``daytona`` names :class:`envlayer_daytona.backend.DaytonaEnvironment`.
Modules, one job each: ``options`` (schema), ``identity`` (names, labels, fingerprint),
``client`` (SDK client and error translation), ``sandbox`` (create / attach / start),
``script`` (the shell text sent to the sandbox and its parsing), ``session`` (running
commands in a Daytona session), ``files`` (toolbox file transfer), ``sweep`` (list,
remove, reap). Nothing here imports the Daytona SDK at import time.
"""

__version__ = "0.1.0"
