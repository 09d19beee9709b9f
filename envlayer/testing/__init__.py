"""Public test kit for backend authors: ``EnvironmentConformance`` (a pytest suite).

Importing this package requires pytest; ``import envlayer`` never imports it.
"""

from envlayer.testing.conformance import EnvironmentConformance

__all__ = ["EnvironmentConformance"]
