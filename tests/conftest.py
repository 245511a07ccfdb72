import os
import subprocess
import sys
from pathlib import Path

import pytest

# Triton must run in its interpreter on machines without a GPU; the flag has to be set before the
# first `import triton` anywhere in the session.
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
os.environ.setdefault("DISABLE_MKDOCS_2_WARNING", "true")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def built_site() -> Path:
    """The real site, built once per session with `mkdocs build --strict` into site/ (runs every
    experiment, from the cache when unchanged). Browser tests serve this folder. DISTLAB_SITE_DIR
    builds elsewhere (several people testing in one working tree must not share site/), and
    DISTLAB_ONLY, passed through, builds selected pages only while developing."""
    out = Path(os.environ.get("DISTLAB_SITE_DIR", REPO / "site")).resolve()
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"strict site build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return out
