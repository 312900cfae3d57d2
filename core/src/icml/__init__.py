"""icml-core: the thin host for ICML 2026 method plugins.

Light on import: only the hook markers and typed objects load eagerly (no torch, no typer).
Write a plugin with::

    import icml

    @icml.hookimpl
    def icml_plugin_info() -> icml.PluginInfo: ...

    @icml.hookimpl
    def icml_train(ctx: icml.RunContext, config) -> icml.RunResult: ...
"""

from __future__ import annotations

from typing import Any

from icml import _quiet
from icml.config import ConfigError, option
from icml.hookspecs import CAPABILITY_HOOKS, hookimpl, hookspec
from icml.loader import API_VERSION
from icml.types import Paper, PluginInfo, RunContext, RunResult, Table

_quiet.install()  # two offline-mode warnings of peft's imports that are not failures

__version__ = "0.1.10"
CAPABILITIES = tuple(CAPABILITY_HOOKS)

__all__ = [
    "API_VERSION", "CAPABILITIES", "ConfigError", "Paper", "PluginInfo", "RunContext",
    "RunResult", "Table", "hookimpl", "hookspec", "option", "run", "load_plugins",
    "__version__",
]


def __getattr__(name: str) -> Any:  # PEP 562: the runner pulls in more; load it on first use
    if name == "run":
        from icml.runner import run

        return run
    if name == "load_plugins":
        from icml.loader import load_plugins

        return load_plugins
    raise AttributeError(f"module 'icml' has no attribute {name!r}")
