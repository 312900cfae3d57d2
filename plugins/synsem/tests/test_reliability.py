"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

from pathlib import Path

from icml.testing import icml_cli, one_line_error


def test_layer_out_of_range_exits_2(tmp_path: Path) -> None:
    proc = icml_cli("run", "synsem", "--set", "extraction.layers=[100]",
                    "--set", "toy.num_layers=2", "--set", "toy.n_templates=6",
                    "--set", "toy.per_template=3",
                    "--out", str(tmp_path))
    assert proc.returncode == 2
    line = one_line_error(proc)
    assert "'extraction.layers'" in line and "layer 100" in line and "0..2" in line
