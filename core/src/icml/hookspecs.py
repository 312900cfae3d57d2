"""The plugin contract: hook specifications every `icml` plugin implements a subset of.

A plugin is a module named by an entry point in the group ``icml.plugins``; the entry point's
name is the plugin's *slug*. The module implements hooks with the ``icml.hookimpl`` marker.

Two kinds of hooks:

* ``icml_plugin_info`` -- metadata. **Every** plugin answers for itself; the core collects one
  answer per plugin.
* The five *capability* hooks (``icml_train``, ``icml_infer``, ``icml_evaluate``,
  ``icml_quantize``, ``icml_differentiate``). A run goes to **exactly one chosen plugin**: the
  core calls the hook through a caller from which every other method plugin is removed, so two
  plugins implementing ``icml_train`` never compete. Wrappers (``@hookimpl(wrapper=True)``) of
  non-method plugins -- the core's own seeding and timing wrappers, or third-party tracing --
  stay in the chain.

Every capability hook receives the same two arguments and returns the same type, so a plugin's
hook is a thin adapter from its typed config to its Python API.

Evolution: arguments may be added, never renamed or removed (pluggy lets an implementation
accept a subset of the arguments). Incompatible changes bump ``icml.API_VERSION``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from icml.types import PluginInfo, RunContext, RunResult

PROJECT = "icml"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def icml_plugin_info() -> PluginInfo:
    """Describe this plugin. Called on every loaded plugin; each answers for itself.

    Returns a :class:`icml.PluginInfo`: ``name`` (must equal the entry-point slug), ``title``,
    one-line ``summary``, ``paper`` (title, authors, venue, URL, BibTeX), ``capabilities`` (the
    capability hooks it implements, primary first) and ``configs`` (one config dataclass per
    capability, see :mod:`icml.config`). The version is filled in by the core from the plugin's
    distribution. Must not import heavy libraries (torch, transformers, ...).
    """


@hookspec(firstresult=True)
def icml_train(ctx: RunContext, config: Any) -> RunResult:
    """Train (or fine-tune) with the plugin's method. Only the chosen plugin answers.

    ``ctx`` is the :class:`icml.RunContext` (run folder, seed, device, dtype, logger, progress);
    ``config`` is an instance of the plugin's config dataclass for ``train``, already validated.
    Returns a :class:`icml.RunResult` with metrics, tables and artifact paths; the core adds the
    config, versions, seed and timings and writes ``result.json`` and ``report.md``.
    """


@hookspec(firstresult=True)
def icml_infer(ctx: RunContext, config: Any) -> RunResult:
    """Run inference (decoding, generation, cache policies, ...). Only the chosen plugin answers.

    Same arguments and return type as :func:`icml_train`; ``config`` is the plugin's ``infer``
    config.
    """


@hookspec(firstresult=True)
def icml_evaluate(ctx: RunContext, config: Any) -> RunResult:
    """Evaluate a model or method on a benchmark. Only the chosen plugin answers.

    Same arguments and return type as :func:`icml_train`; ``config`` is the plugin's
    ``evaluate`` config.
    """


@hookspec(firstresult=True)
def icml_quantize(ctx: RunContext, config: Any) -> RunResult:
    """Quantize a model and report its quality and size. Only the chosen plugin answers.

    Same arguments and return type as :func:`icml_train`; ``config`` is the plugin's
    ``quantize`` config.
    """


@hookspec(firstresult=True)
def icml_differentiate(ctx: RunContext, config: Any) -> RunResult:
    """Differentiate through a solver or layer and report accuracy and cost. Only the chosen
    plugin answers.

    Same arguments and return type as :func:`icml_train`; ``config`` is the plugin's
    ``differentiate`` config.
    """


CAPABILITY_HOOKS: dict[str, str] = {
    "train": "icml_train",
    "infer": "icml_infer",
    "evaluate": "icml_evaluate",
    "quantize": "icml_quantize",
    "differentiate": "icml_differentiate",
}
"""Capability name -> hook name. The capabilities a plugin may declare."""
