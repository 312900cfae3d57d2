"""Issue 49: every plugin's default job records each arm as it finishes, so Ctrl-C after the
first arm keeps it. The run is interrupted deterministically: right after the plugin's first
``ctx.record*`` call (what a user's Ctrl-C at that moment does), not after a wall-clock delay."""

from __future__ import annotations

import pytest

from icml.loader import load_plugins
from icml.runner import load_result, run
from icml.types import RunContext

SLUGS = sorted(r.slug for r in load_plugins().all_records if r.ok)
# Default jobs that are one arm: nothing finishes before the whole result does.
ONE_ARM = {"synsem": "one extraction pass over all layers, then seconds of statistics on it"}


@pytest.mark.slow  # each runs a default job up to its first arm (5-60 s)
@pytest.mark.parametrize("slug", SLUGS)
def test_ctrl_c_after_the_first_arm_keeps_it(slug, tmp_path, monkeypatch) -> None:
    if slug in ONE_ARM:
        pytest.skip(f"{slug}'s default job is one arm: {ONE_ARM[slug]}")
    recorded = RunContext._recorded

    def interrupt_after_first(self: RunContext) -> None:
        recorded(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(RunContext, "_recorded", interrupt_after_first)
    with pytest.raises(KeyboardInterrupt):
        run(slug, out=tmp_path, show_progress=False, threads=1)
    (run_dir,) = tmp_path.iterdir()
    res = load_result(run_dir)
    assert res.status == "interrupted", f"{slug} finished without recording an arm as it went"
    assert res.partial and (res.metrics or any(t.rows for t in res.tables)), \
        f"{slug}: the arm recorded before Ctrl-C was not kept"
