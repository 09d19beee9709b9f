"""mini-swe-agent prints a banner and creates its global config directory on import:
keep it quiet and inside a temporary directory for these tests, removed when the run ends."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
if "MSWEA_GLOBAL_CONFIG_DIR" not in os.environ:
    _config_dir = tempfile.mkdtemp(prefix="envlayer-test-mswea-")
    os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = _config_dir
    atexit.register(shutil.rmtree, _config_dir, ignore_errors=True)
