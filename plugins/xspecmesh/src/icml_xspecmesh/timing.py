"""The benchmarks' timing loop, written once (``benchmarks/bench.py text``, ``peers_mesh.py``,
``profile_step.py`` and ``batch_mesh.py`` use it): every arm decodes every item, interleaved in
a rotating order (item ``i`` starts with arm ``i mod n``) so that all arms see the same machine
load, each call timed by the same ``time.perf_counter`` pair around it, and forward calls of the
given modules counted by forward hooks (removed afterwards, also on error)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any


class CallCounter:
    """Counts forward calls of ``module`` through a forward hook; ``remove()`` detaches it."""

    def __init__(self, module: Any) -> None:
        self.n = 0
        self.handle = module.register_forward_hook(self._hook)

    def _hook(self, *_: Any) -> None:
        self.n += 1

    def remove(self) -> None:
        self.handle.remove()


def interleaved(items: Sequence[Any], arms: Mapping[str, Callable[[Any], Any]], *,
                counters: Mapping[str, Any] | None = None,
                warmup: Any = None) -> dict[str, dict[str, list[Any]]]:
    """Run ``arms[name](item)`` for every item and arm, in a rotating order.

    Returns ``{name: {"sec": [...], "out": [...], <counter>: [...]}}`` with one entry per item,
    in item order: the seconds of the call, what it returned, and for each ``counters`` entry
    (label -> module) the forward calls of that module during the call. ``warmup`` (an item, or
    ``None``) is decoded once by every arm first, untimed, so that no arm pays first-call costs.
    """
    names = list(arms)
    hooks = {label: CallCounter(m) for label, m in (counters or {}).items()}
    rec: dict[str, dict[str, list[Any]]] = {
        n: {"sec": [], "out": [], **{label: [] for label in hooks}} for n in names}
    try:
        if warmup is not None:
            for fn in arms.values():
                fn(warmup)
        for i, item in enumerate(items):
            for j in range(len(names)):
                name = names[(i + j) % len(names)]
                before = {label: h.n for label, h in hooks.items()}
                t0 = time.perf_counter()
                out = arms[name](item)
                sec = time.perf_counter() - t0
                r = rec[name]
                r["sec"].append(sec)
                r["out"].append(out)
                for label, h in hooks.items():
                    r[label].append(h.n - before[label])
    finally:
        for h in hooks.values():
            h.remove()
    return rec


def print_and_write(args: Any, *, script: str, name: str, title: str, cols: Sequence[str],
                    rows: Sequence[Sequence[Any]], timing: Sequence[str], metrics: Mapping,
                    clock: Any, t_build: float) -> None:
    """The tail the mesh timing scripts share: print the table as markdown and, with
    ``args.out_results``, write it as a results file whose command is ``python <script> <argv>``
    and whose ``timing`` columns are declared clock readings (shown, never compared)."""
    import shlex
    import sys

    from icml import results as icml_results

    print(title)
    print("| " + " | ".join(cols) + " |")
    for r in rows:
        print("| " + " | ".join(icml_results.render_cell(c, ".3g") for c in r) + " |")
    print(f"training {t_build:.0f} s, decoding {clock.wall() - t_build:.0f} s", file=sys.stderr)
    if args.out_results:
        command = f"python {script} " + shlex.join(sys.argv[1:])
        why = "clock reading on a shared machine"
        tab = icml_results.make_table(title, list(cols), [list(r) for r in rows], name=name,
                                      formats={c: ".3g" for c in cols[2:]})
        icml_results.write(args.out_results, [tab], command=command, plugin="xspecmesh",
                           seeds=[0], quick=False, clock=clock, threads=args.threads,
                           tolerance={c: {"timing": True, "why": why} for c in timing},
                           metrics={"arms": dict(metrics), "train_seconds": round(t_build, 1)})
        print(f"results file: {args.out_results}", file=sys.stderr)


def tiny_mesh_backbone(n_train: int, backbone_steps: int, device: str = "cpu") -> tuple:
    """The mesh timing scripts' backbone: the mesh tokenizer (32 bins, axis tokens), ``n_train``
    primitive meshes (seed 0) and a Llama backbone of hidden 64 x 3 layers trained on them for
    ``backbone_steps`` steps (batch 16, lr 5e-3, seed 0). Returns ``(tok, data, model)``."""
    from icml_xspecmesh.backbone import build_backbone, train_backbone
    from icml_xspecmesh.dataset import CLASSES, make_primitive_dataset
    from icml_xspecmesh.tokenizer import MeshTokenizer

    tok = MeshTokenizer(n_bins=32, n_classes=len(CLASSES), axis_tokens=True)
    data = make_primitive_dataset(n_train, seed=0, tokenizer=tok)
    model = build_backbone(tok, hidden_size=64, num_layers=3, seed=0, device=device,
                           max_positions=512)
    train_backbone(model, data, steps=backbone_steps, batch_size=16, lr=5e-3, seed=0)
    return tok, data, model
