"""Public test kit for backend authors: ``EnvironmentConformance`` (a pytest suite) and
``ExecContractConformance`` (bad input, output floods, session semantics).

Importing this package requires pytest; ``import envlayer`` never imports it.
"""

from envlayer.testing.conformance import EnvironmentConformance, ExecContractConformance

__all__ = ["EnvironmentConformance", "ExecContractConformance"]
