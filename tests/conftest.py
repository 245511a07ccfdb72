import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Triton must run in its interpreter on machines without a GPU, decided before the first `import triton` of the
# session: distlab/__init__.py holds that one rule, so import it first.
import distlab  # noqa: F401

os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
os.environ.setdefault("DISABLE_MKDOCS_2_WARNING", "true")

REPO = Path(__file__).resolve().parent.parent
_BUILD_STATES: dict[Path, str] = {}


def tree_state() -> str:
    """HEAD and every uncommitted change, hashed: equal states mean the same code was built."""
    h = hashlib.sha256()
    for args in (["rev-parse", "HEAD"], ["status", "--porcelain", "--untracked-files=all"], ["diff", "HEAD"]):
        proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, timeout=60)
        h.update(proc.stdout + b"\0")
    return h.hexdigest()


@pytest.fixture(scope="session")
def require_same_code(built_site):
    """A check for tests that build or run again and compare with built_site: it skips the test when
    the code changed since built_site was built (people editing or committing in a shared working
    tree), since that is not the same commit. In CI (a fresh clone) nothing changes and it never skips."""
    state = _BUILD_STATES[built_site]

    def check() -> None:
        if tree_state() != state:
            pytest.skip("the working tree changed since built_site was built (an edit or a commit)")

    return check


@pytest.fixture(scope="session")
def built_site() -> Path:
    """The real site, built once per session with `mkdocs build --strict` into site/ (runs every
    experiment, from the cache when unchanged). Browser tests serve this folder. DISTLAB_SITE_DIR
    builds elsewhere (several people testing in one working tree must not share site/), and
    DISTLAB_ONLY, passed through, builds selected pages only while developing."""
    out = Path(os.environ.get("DISTLAB_SITE_DIR", REPO / "site")).resolve()
    _BUILD_STATES[out] = tree_state()
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"strict site build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return out


@pytest.fixture(autouse=True)
def close_drawn_figures():
    """The drawing tests get a matplotlib figure back to inspect it, as a reader's code would; pyplot keeps every
    figure until it is closed, and past 20 open in one worker its warning (an error under our filterwarnings)
    would fail whichever later test happens to draw next."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
