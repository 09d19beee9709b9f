"""Inspect AI sandbox provider over envlayer backends."""

__version__ = "0.1.0"
