"""Adapters that put envlayer behind other agent frameworks' interfaces.

* :mod:`envlayer.integrations.minisweagent`: a mini-swe-agent environment;
* the Inspect AI sandbox provider is the separate distribution ``envlayer-inspect``.

Importing this package (or listing backends) never imports a framework: each adapter
imports what it needs only when it is used. See ``docs/integrations.md``.
"""
