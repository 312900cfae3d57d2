"""icml-core's pytest plugin (entry point ``pytest11``: ``icml_testing``), loaded in every pytest
session of an environment where icml-core is installed.

It runs each test with one torch CPU thread, or ``OMP_NUM_THREADS`` threads when that is set
(on a shared, loaded machine two spinning OpenMP threads made tiny-model tests 5-25x slower than
one), and restores the previous count after the test, so nothing leaks into other tests. A
test that needs another count says so with ``@pytest.mark.torch_threads(2)``.

It never imports torch itself: when the session has not imported torch by the time a test
starts (a plugin's conftest or test module importing torch at the top has), the test runs
untouched. Where torch is not installed it does nothing. Disable it with ``-p no:icml_testing``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

__all__ = ["default_threads", "torch_threads"]


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
