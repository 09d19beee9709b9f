"""envlayer's Docker backend (distribution ``envlayer-docker``).

The entry point ``docker`` names :class:`envlayer_docker.backend.DockerEnvironment`.
Modules, one job each: ``options`` (schema), ``labels`` and ``naming`` (identity),
``owner`` (private-container owners), ``client`` (daemon connection and errors),
``errors`` (the one SDK-error translation table), ``recovery`` (recover the container
and retry once), ``container`` (create / attach / reuse), ``transport`` (an attached exec
as a core ByteStream), ``runners`` (session, one-shot and helper commands, on the core's
exec parts), ``oneshot`` (the one-shot wrapper), ``files`` (archives), ``reaper``
(sweeps), ``teardown`` (background removal). ``backend`` is a thin front over them.
``sdk`` is the only module that imports the Docker SDK, on first use, and without
paramiko when no ``ssh://`` daemon is used.
"""

__version__ = "0.1.0"
