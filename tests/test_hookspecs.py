"""The contract's documentation: every hook spec documented with its exact signature and its
calling rule, in the docstring and in the README (Datasette's meta-test)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from icml import hookspecs
from icml.hookspecs import CAPABILITY_HOOKS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
SPECS = [name for name in dir(hookspecs) if name.startswith("icml_")]


def test_every_capability_has_a_spec() -> None:
    assert set(CAPABILITY_HOOKS.values()) | {"icml_plugin_info"} == set(SPECS)


@pytest.mark.parametrize("name", SPECS)
def test_spec_docstring_says_who_answers(name: str) -> None:
    doc = " ".join((inspect.getdoc(getattr(hookspecs, name)) or "").split())
    assert "Only the chosen plugin answers" in doc or "every loaded plugin" in doc


@pytest.mark.parametrize("name", SPECS)
def test_readme_documents_exact_signature(name: str) -> None:
    params = ", ".join(inspect.signature(getattr(hookspecs, name)).parameters)
    assert f"`{name}({params})`" in README


@pytest.mark.parametrize("name", sorted(CAPABILITY_HOOKS.values()))
def test_capability_specs_pick_one_result(name: str) -> None:
    spec = getattr(hookspecs, name)
    assert spec.icml_spec["firstresult"] is True
