"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from icml.testing import icml_cli, one_line_error


@pytest.mark.parametrize("cap", ["evaluate", "train"])
def test_unknown_family_exits_2(tmp_path: Path, cap: str) -> None:
    proc = icml_cli("run", "cage", cap, "--set", "scenes.families=foo", "--set", "n_images=1",
                    "--out", str(tmp_path))
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert "'scenes.families'" in line and "'foo'" in line and "domino" in line
