"""icml-core's pytest plugin (entry point ``pytest11``: ``icml_testing``), loaded in every pytest
session of an environment where icml-core is installed.

It runs each test with one torch CPU thread, or ``OMP_NUM_THREADS`` threads when that is set
(on a shared, loaded machine two spinning OpenMP threads made tiny-model tests 5-25x slower than
one), and restores the previous count after the test, so nothing leaks into other tests. A
test that needs another count says so with ``@pytest.mark.torch_threads(2)``.

It never imports torch itself: when the session has not imported torch by the time a test
starts (a plugin's conftest or test module importing torch at the top has), the test runs
untouched. Where torch is not installed it does nothing. Disable it with ``-p no:icml_testing``.

Strict dependencies (CI): with ``ICML_STRICT_PLUGINS=1`` (``.ci/run`` and the nox sessions set
it), a test that ``pytest.importorskip``-s a module its own distribution declares -- in
``dependencies`` or in the ``test`` extra of the nearest ``pyproject.toml`` above the test file
(extras the ``test`` extra names, ``pkg[a,b]``, are followed) -- fails instead of skipping: an
environment that lacks it is broken, and a silent skip would let CI pass without running the
test (cal-grpo's TRL route, issue 66). A module the distribution does not declare (an optional
backend such as ``rank_bm25``) still skips. Modules of this repository's own packages
(``icml_*``) count as declared for the cross-package tests. ``ICML_OPTIONAL_DEPS=a,b`` lists
modules that may skip anyway.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

__all__ = ["default_threads", "torch_threads", "declared_modules"]


def default_threads() -> int:
    """``OMP_NUM_THREADS`` when it is a positive integer, else 1."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "") or 1))
    except ValueError:
        return 1


@contextmanager
def torch_threads(n: int | None = None) -> Iterator[int | None]:
    """Run the block with ``n`` torch threads (default :func:`default_threads`) and restore
    the previous count; a no-op (yields ``None``) when torch has not been imported."""
    torch: Any = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "set_num_threads"):
        yield None
        return
    old = torch.get_num_threads()
    n = default_threads() if n is None else n
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(old)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "torch_threads(n): run this test with n torch threads (icml-core's "
        "default: one, or OMP_NUM_THREADS)")


@pytest.fixture(autouse=True)
def _icml_torch_threads(request: pytest.FixtureRequest) -> Iterator[None]:
    """One torch thread per test (or OMP_NUM_THREADS, or the test's ``torch_threads`` mark);
    the previous count comes back afterwards."""
    mark = request.node.get_closest_marker("torch_threads")
    with torch_threads(int(mark.args[0]) if mark and mark.args else None):
        yield


# -- strict dependencies ------------------------------------------------------------------
_IMPORT_SKIP = re.compile(r"could not import '([^']+)'")
# import name -> distribution name, where they differ (the rest: "_" -> "-", lower case)
_DIST_OF = {"sklearn": "scikit-learn", "yaml": "pyyaml", "PIL": "pillow",
            "cv2": "opencv-python", "skimage": "scikit-image", "Bio": "biopython",
            "OpenEXR": "openexr", "google.protobuf": "protobuf"}


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(req: str) -> tuple[str, list[str]]:
    """``"flwr[simulation]>=1.42; python_version>'3.9'"`` -> ``("flwr", ["simulation"])``."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", req)
    if not m:
        return "", []
    extras = [e.strip() for e in (m.group(2) or "").split(",") if e.strip()]
    return _canon(m.group(1)), extras


@functools.cache
def declared_modules(pyproject: Path) -> frozenset[str]:
    """Canonical distribution names a ``pyproject.toml`` declares for its tests: its
    ``dependencies`` plus its ``test`` extra, following extras of itself that those name."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            return frozenset()
    try:
        project = tomllib.loads(pyproject.read_text()).get("project", {})
    except (OSError, ValueError):
        return frozenset()
    me = _canon(project.get("name", ""))
    extras = project.get("optional-dependencies", {})
    names: set[str] = set()
    todo, seen = list(project.get("dependencies", [])), set()
    todo += extras.get("test", [])
    seen.add("test")
    while todo:
        name, sub = _req_name(todo.pop())
        if name == me:
            for e in sub:
                if e not in seen:
                    seen.add(e)
                    todo += extras.get(e, [])
        elif name:
            names.add(name)
    return frozenset(names)


def _nearest_pyproject(path: Path) -> Path | None:
    for parent in [path, *path.parents]:
        candidate = parent / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _strict_failure(path: Path, module: str) -> str | None:
    """Why skipping ``module`` in a test at ``path`` is an error here, or None (it may skip)."""
    if os.environ.get("ICML_STRICT_PLUGINS") != "1":
        return None
    allowed = {m.strip() for m in os.environ.get("ICML_OPTIONAL_DEPS", "").split(",")}
    top = module.split(".")[0]
    if module in allowed or top in allowed:
        return None
    if top.startswith("icml_") or top == "icml":
        return (f"ICML_STRICT_PLUGINS=1: the test needs {module!r}, a package of this "
                "repository, which does not import: install it (requirements-test.txt)")
    pyproject = _nearest_pyproject(path.parent if path.suffix else path)
    if pyproject is None:
        return None
    declared = declared_modules(pyproject)
    dist = _canon(_DIST_OF.get(module, _DIST_OF.get(top, top)))
    if dist not in declared:
        return None
    return (f"ICML_STRICT_PLUGINS=1: the test needs {module!r}, which {pyproject} declares "
            "(dependencies or the test extra) but which does not import here: the test "
            "environment is incomplete, so the test fails instead of skipping (install the "
            "test extra, or list the module in ICML_OPTIONAL_DEPS)")


def _strict_report(report: Any, path: Path) -> None:
    if not report.skipped or os.environ.get("ICML_STRICT_PLUGINS") != "1":
        return
    longrepr = report.longrepr
    message = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    hit = _IMPORT_SKIP.search(str(message))
    if not hit:
        return
    why = _strict_failure(path, hit.group(1))
    if why is not None:
        report.outcome = "failed"
        report.longrepr = f"{why}\n(skip message: {message})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    _strict_report(outcome.get_result(), Path(str(item.path)))


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _strict_report(outcome.get_result(), Path(str(collector.path)))
