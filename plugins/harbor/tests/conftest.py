"""The Harbor environment's tests.

Harbor needs Python 3.12+, and the project's main test run uses 3.11: there, only the
tests that need no Harbor (``test_selection.py``) are collected, and ``scripts/test``
runs this directory again in ``.venv-harbor`` (a 3.12 interpreter with the ``harbor``
extra; see docs/development.md). Under ``CI=true`` a 3.12 run without Harbor fails.
"""

from __future__ import annotations

import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # harbor_runs

NEEDS_HARBOR = ["test_oracle_docker.py", "test_environment_docker.py", "test_oracle_fakes.py"]

if importlib.util.find_spec("harbor") is None:
    if sys.version_info >= (3, 12) and os.environ.get("CI") == "true":
        raise RuntimeError("Harbor is not installed: `uv sync --package envlayer-harbor --extra harbor --group test`")
    collect_ignore = NEEDS_HARBOR
