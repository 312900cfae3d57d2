"""`icml --help` and `icml list` import no heavy library with every installed plugin loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from icml.loader import HEAVY_MODULES

PROBE = """
import sys
sys.argv = ["icml", *{args!r}]
from icml.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {heavy!r})
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
print("CODE=" + str(code), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["list"], ["list", "--json"], ["--version"]])
def test_cli_path_imports_nothing_heavy(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(args=args, heavy=set(HEAVY_MODULES))],
                          capture_output=True, text=True, timeout=120)
    lines = dict(line.split("=", 1) for line in proc.stderr.splitlines() if "=" in line
                 and line.split("=", 1)[0] in ("HEAVY", "CODE"))
    assert lines.get("CODE") == "0", proc.stderr
    assert lines.get("HEAVY") == "", f"`icml {' '.join(args)}` imported {lines.get('HEAVY')}"


def test_icml_package_import_is_light() -> None:
    from icml.testing import assert_light_import

    assert_light_import("icml")
    assert_light_import("icml.cli")
