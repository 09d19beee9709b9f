"""mini-swe-agent prints a banner and creates its global config directory on import:
keep it quiet and inside a temporary directory for these tests."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", tempfile.mkdtemp(prefix="envlayer-test-mswea-"))
