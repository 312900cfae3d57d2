"""Are the trained transforms the same at any thread count of the caller? On the real model
(SmolLM2-135M-Instruct), the local stage (``--steps`` steps) and ``--e2e-steps`` end-to-end
steps at W4A4KV4, run once with the caller at 1 torch thread and once at 2, with
``training.threads`` = ``--train-threads`` (1, the default since 0.3.8: both stages pinned to
one thread; 0: the caller's count, as before 0.3.8). Also checks that merging with the
rotation computed once gives the same weights as computing it per weight.

    python plugins/fptquant/benchmarks/thread_repro.py                    # pinned: equal
    python plugins/fptquant/benchmarks/thread_repro.py --train-threads 0  # unpinned
"""

from __future__ import annotations

import argparse
import contextlib
import copy

import torch
from icml_fptquant.config import QuantOptions, TrainingOptions, TransformOptions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--e2e-steps", type=int, default=2)
    ap.add_argument("--train-threads", type=int, default=1)
    args = ap.parse_args()
    import icml_fptquant.transforms as transforms
    from icml_fptquant import FPTQuantConfig
    from icml_fptquant.apply import apply_fpt_transforms, merge_transforms
    from icml_fptquant.training import optimize_e2e, optimize_local

    from icml.data import eval_token_ids
    from icml.models import load_pretrained

    fp, tok = load_pretrained("smollm2-135m-instruct")
    calib = torch.tensor(eval_token_ids(tok, 256, offset=200_000)).view(1, 256)
    cfg = FPTQuantConfig(transforms=TransformOptions(untie_embeddings=True),
                         quant=QuantOptions(w_bits=4, a_bits=4, kv_bits=4),
                         training=TrainingOptions(local_steps=args.steps,
                                                  local_row_fraction=0.125,
                                                  e2e_steps=args.e2e_steps, e2e_batch_size=1,
                                                  e2e_lr=1e-3, threads=args.train_threads))
    states = []
    for run, caller_threads in enumerate((1, 2)):
        torch.set_num_threads(caller_threads)
        model = copy.deepcopy(fp)
        apply_fpt_transforms(model, cfg)
        optimize_local(model, cfg)
        optimize_e2e(model, calib, cfg)
        states.append({k: v.clone() for k, v in model.fpt_transforms.state_dict().items()})
        if run == 0:
            other = copy.deepcopy(fp)
            apply_fpt_transforms(other, cfg)
            other.fpt_transforms.load_state_dict(states[0])
            cached = transforms.cached_rotation
            transforms.cached_rotation = lambda rot: contextlib.nullcontext()
            try:
                merge_transforms(other)  # Q recomputed for every weight (0.3.0)
            finally:
                transforms.cached_rotation = cached
            merge_transforms(model)
            same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                         other.state_dict().values()))
            print(f"merge with Q once == Q per weight: {same}")
    repro = all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    diff = max(float((states[0][k].float() - states[1][k].float()).abs().max())
               for k in states[0])
    print(f"training.threads={args.train_threads}: trained transforms equal with the caller "
          f"at 1 and at 2 threads: {repro} (max abs difference {diff:.3g})")


if __name__ == "__main__":
    main()
