"""The local backend: commands on this machine through a persistent shell session
(:mod:`.backend`, :class:`~envlayer.local.backend.LocalEnvironment`), with its session,
snapshot store, task records and terminal each in a module of its own."""
