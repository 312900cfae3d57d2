"""icml.lazy.lazy_exports: the one-line PEP 562 public API for plugin packages (issue 48)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from icml.lazy import lazy_export_problems, lazy_exports

PKG = {
    "__init__.py": """
        from icml.lazy import lazy_exports

        __getattr__, __dir__, __all__ = lazy_exports(__name__, {
            "Press": "presses", "make_press": "presses", "Alias": "presses:Press",
            "deep": "sub.inner", "Gone": "presses",
        })
        LOCAL = 1
    """,
    "presses.py": """
        import sys
        sys.modules[__name__].IMPORTS = getattr(sys.modules[__name__], "IMPORTS", 0) + 1
        class Press:
            pass
        def make_press():
            return Press()
    """,
    "sub/__init__.py": "",
    "sub/inner.py": "deep = 42\n",
}


@pytest.fixture
def pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    name = f"lazydemo_{tmp_path.name.replace('-', '_')}"
    for rel, text in PKG.items():
        path = tmp_path / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, tmp_path
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def test_names_resolve_on_first_use_and_are_cached(pkg) -> None:
    import importlib

    name, _ = pkg
    mod = importlib.import_module(name)
    assert f"{name}.presses" not in sys.modules  # importing the package imports no submodule
    assert mod.__all__ == sorted(["Press", "make_press", "Alias", "deep", "Gone"])
    assert {"Press", "LOCAL", "deep"} <= set(dir(mod))
    press_cls = mod.Press
    assert press_cls is sys.modules[f"{name}.presses"].Press
    assert "Press" in vars(mod)  # cached in the module: __getattr__ is not reached again
    assert mod.Alias is press_cls and isinstance(mod.make_press(), press_cls)
    assert mod.deep == 42
    assert sys.modules[f"{name}.presses"].IMPORTS == 1


def test_unknown_name_and_stale_table_say_which_module(pkg) -> None:
    import importlib

    name, _ = pkg
    mod = importlib.import_module(name)
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'nope'"):
        mod.nope  # noqa: B018
    assert not hasattr(mod, "nope")
    with pytest.raises(ImportError, match=f"{name}.Gone is exported from {name}.presses, "
                                          "which has no attribute 'Gone'"):
        mod.Gone  # noqa: B018
    from_import = f"from {name} import Press"
    exec(from_import, {})  # `from pkg import Name` goes through __getattr__ too
    problems = lazy_export_problems(name)
    assert problems == [f"{name}.Gone: {name}.presses has no attribute 'Gone'"]


def test_bad_table_is_rejected() -> None:
    with pytest.raises(ValueError, match="give the submodule"):
        lazy_exports("x", {"A": ""})
    assert lazy_export_problems("icml.config") == []  # no table: nothing to check


def test_kit_modules_are_light() -> None:
    from icml.testing import assert_light_import

    for module in ("icml.lazy", "icml.training"):
        assert_light_import(module)


def test_host_never_imports_the_kit() -> None:
    """The host (loader, cli, runner, config, types) runs without the kit: importing it loads
    none of icml.testing, icml.training, icml.lazy (nor pytest)."""
    import subprocess

    code = ("import sys, icml, icml.loader, icml.cli, icml.runner, icml.config, icml.types; "
            "print(sorted(m for m in sys.modules if m.startswith(('icml.testing', "
            "'icml.training', 'icml.lazy', 'pytest', '_pytest'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
