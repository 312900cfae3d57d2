"""The core's own plugin: wrappers around every capability hook.

Registered before any other plugin and never removed from a run's hook caller, so seeding and
timing happen whichever plugin answers -- the pattern third-party middleware follows too.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

from icml.hookspecs import hookimpl
from icml.types import RunContext, RunResult


def _wrap(ctx: RunContext) -> Generator[None, Any, Any]:
    from icml.seeding import seed_everything

    seed_everything(ctx.seed)
    previous = _set_threads(ctx.threads)
    start = time.perf_counter()
    try:
        result = yield
    finally:
        if previous is not None:
            _set_threads(previous)
    if isinstance(result, RunResult):
        result.timings.setdefault("total_s", round(time.perf_counter() - start, 4))
    return result


def _set_threads(n: int | None) -> int | None:
    """Set torch's intra-op thread count; returns the previous one (None when nothing was set).
    On a busy or small CPU, tiny models often run much faster with one thread."""
    if n is None:
        return None
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    return previous


@hookimpl(wrapper=True, tryfirst=True)
def icml_train(ctx: RunContext, config: Any) -> Generator[None, Any, Any]:
    return (yield from _wrap(ctx))


@hookimpl(wrapper=True, tryfirst=True)
def icml_infer(ctx: RunContext, config: Any) -> Generator[None, Any, Any]:
    return (yield from _wrap(ctx))


@hookimpl(wrapper=True, tryfirst=True)
def icml_evaluate(ctx: RunContext, config: Any) -> Generator[None, Any, Any]:
    return (yield from _wrap(ctx))


@hookimpl(wrapper=True, tryfirst=True)
def icml_quantize(ctx: RunContext, config: Any) -> Generator[None, Any, Any]:
    return (yield from _wrap(ctx))


@hookimpl(wrapper=True, tryfirst=True)
def icml_differentiate(ctx: RunContext, config: Any) -> Generator[None, Any, Any]:
    return (yield from _wrap(ctx))
