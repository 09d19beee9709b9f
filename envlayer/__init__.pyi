"""Static view of the lazily exported names of envlayer/__init__.py."""

__version__: str
