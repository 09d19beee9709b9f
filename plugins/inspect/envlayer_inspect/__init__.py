"""Inspect AI sandbox provider over envlayer backends."""
