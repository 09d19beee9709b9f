"""envlayer's Daytona backend (distribution ``envlayer-daytona``).

The entry point ``daytona`` names :class:`envlayer_daytona.backend.DaytonaEnvironment`.
Modules, one job each: ``options`` (schema), ``identity`` (names, labels, fingerprint),
``client`` (SDK client and error translation), ``sandbox`` (create / attach / start),
``stream`` (a byte stream to a shell in the sandbox over the toolbox API, which the core's
persistent-shell protocol runs on), ``files`` (toolbox file transfer), ``sweep`` (list,
remove, reap). ``sdk`` is the only module that imports the Daytona SDK, on first use.
"""

__version__ = "0.1.0"
