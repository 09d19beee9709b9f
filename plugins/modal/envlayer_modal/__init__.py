"""envlayer's Modal backend (distribution ``envlayer-modal``).

The entry point ``modal`` names :class:`envlayer_modal.backend.ModalEnvironment`.
Modules, one job each: ``options`` (schema), ``tags`` and ``naming`` (identity), ``sdk``
(the only module that imports the SDK, on first use), ``client`` (connection and error
mapping), ``sandbox`` (create / attach / replace), ``process`` and ``stream`` (an exec's
output as events and as the core's ByteStream, the session watchdog), ``session`` (the
core's persistent shell over one exec), ``oneshot`` (one exec per command), ``killer`` (tree
kill inside the sandbox), ``files`` (``sb.filesystem`` and tar over exec), ``reaper``
(listing and sweeps), ``teardown`` (background termination). ``backend`` is the front.
"""

__version__ = "0.1.0"
