"""Public test kit for backend authors: ``EnvironmentConformance`` (a pytest suite) and
``ExecContractConformance`` (bad input, output floods, session semantics) and
``SnapshotConformance`` (for backends that declare ``snapshot``).

Install it with ``pip install "envlayer[testing]"`` (it brings pytest). Importing this
package requires pytest; ``import envlayer`` never imports it. Importing it registers
the kit's modules for pytest's assertion rewriting, so a failing check shows the values
it compared, as your own test modules do.
"""

import pytest

pytest.register_assert_rewrite("envlayer.testing.conformance", "envlayer.testing.snapshots")

from envlayer.testing.conformance import EnvironmentConformance, ExecContractConformance  # noqa: E402 - after it
from envlayer.testing.snapshots import SnapshotConformance  # noqa: E402 - after it

__all__ = ["EnvironmentConformance", "ExecContractConformance", "SnapshotConformance"]
