"""envlayer's Docker backend (distribution ``envlayer-docker``).

The entry point ``docker`` names :class:`envlayer_docker.backend.DockerEnvironment`.
Modules, one job each: ``options`` (schema), ``labels`` and ``naming`` (identity),
``owner`` (private-container owners), ``client`` (daemon connection and errors),
``container`` (create / attach / reuse), ``protocol`` (marker wire protocol),
``session`` and ``oneshot`` (running commands), ``killer`` (in-container tree kill),
``files`` (archives), ``reaper`` (sweeps), ``teardown`` (background removal).
Nothing here imports the Docker SDK at import time.
"""

__version__ = "0.1.0"
