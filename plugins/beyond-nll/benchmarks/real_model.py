"""The capability continuum on a real pretrained model: SmolLM2-135M-Instruct (vocabulary 49152).

Three tasks whose place on the continuum is *measured* before training (greedy exact match of
the untouched model on the held-out test set, and the mean target probability on the training
data):

* ``strong``: the first letter of an English word (``"house: h\\nriver: r\\nplanet:"`` ->
  ``" p"``); the prior mostly knows it;
* ``medium``: the word in capitals (``"... planet ->"`` -> ``" PLANET"``); the prior sometimes
  knows it;
* ``weak``: a new fixed mapping the prior cannot know: the last digit of a 4-digit number
  through a random digit -> letter code (``"Code: 4721"`` -> ``" q"``; 10 letters, so chance
  is 0.1 once the format is learned); the code is fixed, the test numbers are unseen;
* ``weak4`` (not in the default list): every digit through that code (``"Code 4721 is"`` ->
  ``" q b x e"``); 30 steps of two layers did not learn it.

Words come from the model's own vocabulary (whole-word tokens of 4-7 lowercase letters); train and
test words (numbers for ``weak``, ``weak4``) are disjoint, so the test is held-out. ``--noise``
replaces the trained answer of that share of training examples by a random wrong one (the
evaluated answers stay clean).

Training, for the CPU budget: by default only the top ``--layers`` decoder layers (and the final
norm) are trained, fully (``--lora R``: LoRA adapters of rank R on them instead, via peft); the
frozen layers below run once per example and their output is cached, so a step costs the top
layers and the LM head at the answer positions only. ``--layers all`` fine-tunes every decoder
layer (the token embedding, tied to the LM head, stays frozen); slow on CPU. Recipe as the paper's
trainer: AdamW (0.9, 0.95), weight decay 0.01, cosine with 10% warmup, clip 1.0, "kept"
normalisation. ``dft`` is TRL's ``SFTConfig(loss_type="dft")`` formula (-sg(p) log p, token
mean; equality with TRL's loss is tested in tests/test_real_model.py).

    OMP_NUM_THREADS=1 python plugins/beyond-nll/benchmarks/real_model.py          # the README table

Prints Markdown tables (and ``--json PATH`` writes every run).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import re
import shlex
import statistics
import sys
import time

import torch
from icml_beyond_nll import ProbObjective, prob_objective_loss
from icml_beyond_nll.loop import cosine_with_warmup

DEFAULT_OBJECTIVES = ("logp,p,GeneralFamily-10,OnlyTopP-0.1,OnlyBottomLogP-0.5,dft,"
                      "GeneralFamily-0.5,OnlyBottomP-0.5,OnlyTopLogP-0.1")
TASKS = ("strong", "medium", "weak", "weak4")
DEFAULT_TASKS = ("strong", "medium", "weak")
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def vocab_words(tok) -> list[str]:
    words = {t[1:] for t in tok.get_vocab() if re.fullmatch("\u0120[a-z]{4,7}", t)}
    return sorted(words)


def make_task(task: str, words: list[str], n_train: int, n_test: int, seed: int,
              noise: float) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(prompt, answer) pairs for training (answers possibly noisy) and testing (clean). The
    item split (and the weak task's cipher) is fixed per task; ``seed`` draws the noise."""
    rng = random.Random(1000 + TASKS.index(task))
    if task in ("weak", "weak4"):
        code = random.Random(7).sample(LETTERS, 10)  # digit d -> code[d], fixed
        nums = list(range(1000, 10000))
        rng.shuffle(nums)
        train_items, test_items = nums[:n_train], nums[n_train:n_train + n_test]
        def pair(x):
            if task == "weak":  # the last digit's letter, predicted right after that digit
                return f"Code: {x}", " " + code[x % 10]
            return f"Code {x} is", " " + " ".join(code[int(c)] for c in str(x))

        def corrupt(ans):
            return " " + " ".join(rng.choice([c for c in code if c != a])
                                  for a in ans.split())
    else:
        pool = list(words)
        rng.shuffle(pool)
        train_items, test_items = pool[:n_train], pool[n_train:n_train + n_test]
        if task == "strong":
            def pair(w):
                return f"house: h\nriver: r\n{w}:", " " + w[0]

            def corrupt(ans):
                return " " + rng.choice([c for c in LETTERS if c != ans.strip()])
        else:
            def pair(w):
                return f"house -> HOUSE\nriver -> RIVER\n{w} ->", " " + w.upper()

            def corrupt(ans):
                return " " + rng.choice(words).upper()
    train = []
    rng = random.Random(seed)
    for x in train_items:
        p, a = pair(x)
        train.append((p, corrupt(a) if rng.random() < noise else a))
    return train, [pair(x) for x in test_items]


def encode(tok, pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    """Right-padded ids; labels = answer tokens + the newline that ends them, -100 elsewhere."""
    seqs, starts = [], []
    for p, a in pairs:
        pi = tok(p, add_special_tokens=False)["input_ids"]
        ai = tok(p + a + "\n", add_special_tokens=False)["input_ids"]
        if ai[:len(pi)] != pi:
            raise ValueError(f"prompt tokens change when the answer follows: {p!r} {a!r}")
        seqs.append(ai)
        starts.append(len(pi))
    t = max(map(len, seqs))
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    ids = torch.full((len(seqs), t), pad, dtype=torch.long)
    labels = torch.full((len(seqs), t), -100, dtype=torch.long)
    for i, (s, st) in enumerate(zip(seqs, starts)):
        ids[i, :len(s)] = torch.tensor(s)
        labels[i, st:len(s)] = torch.tensor(s[st:])
    return {"input_ids": ids, "labels": labels}


class TopLayers(torch.nn.Module):
    """The top ``k`` decoder layers + final norm + (frozen, tied) LM head of a Llama-style model,
    run on cached hidden states. Right padding + causal attention need no mask."""

    def __init__(self, model, k: int) -> None:
        super().__init__()
        inner = model.model
        self.layers = torch.nn.ModuleList(copy.deepcopy(layer) for layer in inner.layers[-k:])
        self.norm = copy.deepcopy(inner.norm)
        self.rotary = inner.rotary_emb
        self.layers.requires_grad_(True)
        self.norm.requires_grad_(True)
        self._head = (model.lm_head.weight,)  # shared and frozen; a tuple keeps it unregistered

    def forward(self, h: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(h.shape[1], device=h.device)[None].expand(h.shape[0], -1)
        pe = self.rotary(h, pos)
        for layer in self.layers:
            out = layer(h, attention_mask=None, position_ids=pos, position_embeddings=pe)
            h = out[0] if isinstance(out, tuple) else out
        h = self.norm(h)
        return h[where] @ self._head[0].T  # logits only where a label is predicted


@torch.no_grad()
def bottom_hidden(model, ids: torch.Tensor, k: int, batch: int = 64) -> torch.Tensor:
    """Output of the frozen layers below the top ``k`` (embeddings when k = all layers)."""
    inner = model.model
    outs = []
    for i in range(0, ids.shape[0], batch):
        x = ids[i:i + batch]
        h = inner.embed_tokens(x)
        pos = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
        pe = inner.rotary_emb(h, pos)
        for layer in inner.layers[:len(inner.layers) - k]:
            out = layer(h, attention_mask=None, position_ids=pos, position_embeddings=pe)
            h = out[0] if isinstance(out, tuple) else out
        outs.append(h)
    return torch.cat(outs)


def shifted(labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]


@torch.no_grad()
def evaluate(top: TopLayers, h: torch.Tensor, labels: torch.Tensor, batch: int = 64):
    """Greedy exact match (every answer token, and the newline, is the argmax given the correct
    prefix) and mean target probability."""
    tgt = shifted(labels)
    ok, ps = [], []
    for i in range(0, h.shape[0], batch):
        t = tgt[i:i + batch]
        where = t != -100
        logits = top(h[i:i + batch], where).float()
        y = t[where]
        hit = (logits.argmax(-1) == y)
        p = torch.softmax(logits, -1).gather(-1, y[:, None]).squeeze(-1)
        row = where.nonzero()[:, 0]
        for r in range(t.shape[0]):
            ok.append(bool(hit[row == r].all()))
        ps.append(p)
    return sum(ok) / len(ok), float(torch.cat(ps).mean())


def dft_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """TRL's loss_type="dft": -sg(p) log p summed over tokens / number of tokens."""
    logp = torch.log_softmax(logits.float(), -1).gather(-1, y[:, None]).squeeze(-1)
    return -(logp * logp.detach().exp()).sum() / max(int(y.numel()), 1)


def add_lora(top: TopLayers, rank: int, seed: int) -> None:
    from peft import LoraConfig, inject_adapter_in_model

    torch.manual_seed(seed)
    cfg = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                     "up_proj", "down_proj"])
    inject_adapter_in_model(cfg, top.layers)
    for n, p in top.named_parameters():
        p.requires_grad_("lora_" in n)


def train_one(base: TopLayers, h: torch.Tensor, labels: torch.Tensor, objective: str, *,
              steps: int, batch: int, lr: float, seed: int, lora: int) -> TopLayers:
    top = copy.deepcopy(base)
    top._head = base._head
    if lora:
        add_lora(top, lora, seed)
    params = [p for p in top.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cosine_with_warmup(s, steps, 0.1))
    g = torch.Generator().manual_seed(seed)
    tgt = shifted(labels)
    order: list[int] = []
    top.train()
    for _ in range(steps):
        if len(order) < batch:
            order += torch.randperm(h.shape[0], generator=g).tolist()
        idx, order = order[:batch], order[batch:]
        t = tgt[idx]
        where = t != -100
        logits = top(h[idx], where)
        y = t[where]
        if objective == "dft":
            loss = dft_loss(logits, y)
        else:
            loss = prob_objective_loss(logits, y, objective, shift=False)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        if torch.isfinite(norm):
            opt.step()
        sched.step()
    top.eval()
    return top


def msd(xs: list[float]) -> str:
    if len(xs) < 2:
        return f"{xs[0]:.3f}"
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}"


def table_rows(before: dict, runs: list[dict]) -> tuple[list[str], list[list], list[str],
                                                      list[list]]:
    """The two tables as (columns, rows): accuracy before training per task; accuracy after
    training per objective and task (mean ± sd over the seeds that ran) and per-seed
    comparisons with NLL."""
    tasks = [t for t in TASKS if t in before]
    objectives = list(dict.fromkeys(r["objective"] for r in runs))
    acc = {(r["task"], r["objective"], r["seed"]): r["acc"] for r in runs}
    cols0 = ["task", "accuracy before training (held-out)", "mean target p before (train)"]
    rows0 = [[task, msd([x[0] for x in before[task]]), msd([x[1] for x in before[task]])]
             for task in tasks]
    cols1 = (["objective"] + [f"{t} (n seeds)" for t in tasks]
             + [f"{t}: seeds > / < NLL" for t in tasks])
    rows1 = []
    for obj in objectives:
        cells, cmp = [], []
        for t in tasks:
            seeds = sorted(s for (tt, o, s) in acc if tt == t and o == obj)
            cells.append(f"{msd([acc[(t, obj, s)] for s in seeds])} ({len(seeds)})"
                         if seeds else "not run")
            both = [s for s in seeds if (t, "logp", s) in acc]
            if obj == "logp" or not both:
                cmp.append("-")
                continue
            d = [acc[(t, obj, s)] - acc[(t, "logp", s)] for s in both]
            cmp.append(f"{sum(x > 0 for x in d)}/{len(d)} / {sum(x < 0 for x in d)}/{len(d)}")
        rows1.append([obj, *cells, *cmp])
    return cols0, rows0, cols1, rows1


def tables(before: dict, runs: list[dict]) -> str:
    """Markdown of :func:`table_rows`."""
    cols0, rows0, cols1, rows1 = table_rows(before, runs)

    def md(cols: list[str], rows: list[list]) -> list[str]:
        return (["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])
    return "\n".join(md(cols0, rows0) + [""] + md(cols1, rows1))


def write_results(path: str, before: dict, runs: list[dict], seeds: int, clock,
                  argv: list[str]) -> None:
    """The two tables as a results file (``icml.results``), its command as typed."""
    from icml import results

    cols0, rows0, cols1, rows1 = table_rows(before, runs)
    out = results.write(
        path, [results.make_table("Before training", cols0, rows0, name="before"),
               results.make_table("After training (mean ± sd over seeds; per-seed vs NLL)",
                                  cols1, rows1, name="after")],
        plugin="beyond-nll", seeds=list(range(seeds)), clock=clock, threads=1,
        command="python " + shlex.join(["plugins/beyond-nll/benchmarks/real_model.py", *argv]))
    print(f"# wrote {out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objectives", default=DEFAULT_OBJECTIVES)
    ap.add_argument("--tasks", default=",".join(DEFAULT_TASKS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--layers", default="2", help="top decoder layers to train, or 'all'")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank on those layers (0: full)")
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--n-train", type=int, default=160)
    ap.add_argument("--n-test", type=int, default=100)
    ap.add_argument("--pool", type=float, default=1.25,
                    help="training pool = pool x n-train items; each seed draws n-train of them")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="")
    ap.add_argument("--from-json", nargs="*", default=None,
                    help="print the tables of earlier --json files (merged) and exit")
    ap.add_argument("--out-results", default="",
                    help="also write the tables as a results file "
                         "(plugins/beyond-nll/results/NAME.json)")
    args = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(args)
    from icml import results

    clock = results.Clock()
    if a.from_json:
        before, runs = {}, []
        for path in a.from_json:
            with open(path) as f:
                d = json.load(f)
            for t, b in d["before"].items():
                before.setdefault(t, []).extend(b)
            runs += d["runs"]
        print(tables(before, runs))
        if a.out_results:
            write_results(a.out_results, before, runs,
                          max((r["seed"] for r in runs), default=-1) + 1, clock, args)
        return 0
    torch.set_num_threads(a.threads)
    t0 = time.time()
    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct", device=a.device)
    model.eval().requires_grad_(False)
    n_layers = len(model.model.layers)
    k = n_layers if a.layers == "all" else int(a.layers)
    if not 1 <= k <= n_layers:
        raise SystemExit(f"--layers must be in 1..{n_layers} or 'all'")
    objectives = [s.strip() for s in a.objectives.split(",") if s.strip()]
    for o in objectives:
        if o != "dft":
            ProbObjective.parse(o)
    tasks = [s.strip() for s in a.tasks.split(",") if s.strip()]
    if not tasks or set(tasks) - set(TASKS):
        raise SystemExit(f"--tasks: unknown {sorted(set(tasks) - set(TASKS))}; choose from "
                         f"{', '.join(TASKS)}")
    words = vocab_words(tok)
    base = TopLayers(model, k).to(a.device)
    print(f"# SmolLM2-135M-Instruct, vocab {model.config.vocab_size}, train top {k}/{n_layers} "
          f"layers{f' with LoRA r={a.lora}' if a.lora else ' (full)'}; {a.steps} steps x "
          f"{a.batch}; lr {a.lr}; noise {a.noise}; load {time.time() - t0:.0f} s", flush=True)
    runs: list[dict] = []
    before: dict[str, list[tuple[float, float, float]]] = {}
    for task in tasks:
        dev = a.device
        n_pool = int(a.n_train * a.pool)
        pool, test = make_task(task, words, n_pool, a.n_test, 0, a.noise)
        te = encode(tok, test)
        h_te, te_l = bottom_hidden(model, te["input_ids"].to(dev), k), te["labels"].to(dev)
        acc0, _ = evaluate(base, h_te, te_l)
        h_pool = pool_l = None
        for seed in range(a.seeds):
            if h_pool is None or a.noise > 0:  # noisy answers are redrawn per seed
                pool = make_task(task, words, n_pool, a.n_test, seed, a.noise)[0]
                tr = encode(tok, pool)
                h_pool = bottom_hidden(model, tr["input_ids"].to(dev), k)
                pool_l = tr["labels"].to(dev)
            # each seed trains on its own random subset of the pool, in its own order
            idx = torch.randperm(n_pool, generator=torch.Generator().manual_seed(seed))
            idx = idx[:a.n_train].to(dev)
            h_tr, tr_l = h_pool[idx], pool_l[idx]
            _, p_train = evaluate(base, h_tr, tr_l)
            before.setdefault(task, []).append((acc0, p_train))
            print(f"{task} seed {seed}: before training acc {acc0:.3f} (held-out), mean target "
                  f"p {p_train:.3f} (train); {time.time() - t0:.0f} s", flush=True)
            for obj in objectives:
                ts = time.time()
                top = train_one(base, h_tr, tr_l, obj, steps=a.steps, batch=a.batch, lr=a.lr,
                                seed=seed, lora=a.lora)
                acc, p_te = evaluate(top, h_te, te_l)
                runs.append({"task": task, "seed": seed, "objective": obj, "acc": acc,
                             "mean_p_test": p_te, "before": acc0, "sec": time.time() - ts})
                print(f"{task} seed {seed} {obj:>18}: acc {acc:.3f} (before {acc0:.3f}) "
                      f"{time.time() - ts:.1f} s", flush=True)
                if a.json:  # written after every run, so a cut-off run keeps what it did
                    with open(a.json, "w") as f:
                        json.dump({"args": vars(a), "before": before, "runs": runs}, f, indent=1)
    print()
    print(tables(before, runs))
    print(f"\ntotal {time.time() - t0:.0f} s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "before": before, "runs": runs}, f, indent=1)
    if a.out_results:
        write_results(a.out_results, before, runs, a.seeds, clock, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
