"""Finding and loading backends: the entry-point group, the backend registry, calling into a plugin
(a stray exception becomes ``PluginError``) and install hints."""
