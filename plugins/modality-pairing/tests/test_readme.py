"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path


def test_readme_example_runs(capsys):
    text = (Path(__file__).parents[1] / "README.md").read_text()
    block = re.search(r"## Example\n\n```python\n(.*?)```", text, re.S)
    assert block, "README has no '## Example' python block"
    exec(compile(block.group(1), "README-example", "exec"), {})
    value, converged = capsys.readouterr().out.split()
    assert float(value) > 0 and converged == "True"
