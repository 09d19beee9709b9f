"""Public test kit for backend authors: ``EnvironmentConformance`` (a pytest suite).

Install it with ``pip install "envlayer[testing]"`` (it brings pytest). Importing this
package requires pytest; ``import envlayer`` never imports it. Importing it registers
the kit's modules for pytest's assertion rewriting, so a failing check shows the values
it compared, as your own test modules do.
"""

import pytest

pytest.register_assert_rewrite("envlayer.testing.conformance")

from envlayer.testing.conformance import EnvironmentConformance  # noqa: E402 - after the registration

__all__ = ["EnvironmentConformance"]
