"""Stochastic modality pairing: pair each anchor sample with a random same-class sample of every
other modality instead of its fixed partner (resampled every step).

Three entry points share one vectorised partner draw (:func:`pair_indices`):

* :class:`PairingIndex` — the class structure of one modality's bank (validation lives here);
* :class:`StochasticPairingDataset` — a map-style dataset (plain loops, ``DataLoader``, HF
  ``Trainer``) whose items are ``{modality: tensor, ..., "labels": y}``;
* :class:`StochasticPairingCollator` — a ``data_collator`` that swaps in same-class partners from
  a bank, for loops that already yield anchor samples.

With probability ``p_stochastic`` a sample gets a uniformly random same-class partner (possibly
itself); otherwise it keeps its own (fixed) partner. ``p_stochastic = 0`` is the identity
pairing, ``p_stochastic = 1`` the paper's distributional training.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch

SINGLETON_POLICIES = ("warn", "error", "ignore")


class PairingError(ValueError):
    """The data cannot be paired as asked (missing classes, bad probability, bad shapes)."""


class SingletonClassWarning(UserWarning):
    """A class has one sample in a bank: its partner is always itself (fixed pairing)."""


def check_probability(p: float, name: str = "p_stochastic") -> float:
    """Return ``p`` as a float or raise :class:`PairingError` when it is not in [0, 1]."""
    try:
        value = float(p)
    except (TypeError, ValueError):
        raise PairingError(f"{name}={p!r} is not a number: pass a probability in [0, 1]") from None
    if not 0.0 <= value <= 1.0:  # also rejects NaN
        raise PairingError(f"{name}={p!r} is outside [0, 1]: 0 keeps the fixed pairing, "
                           "1 always draws a random same-class partner")
    return value


def _as_labels(labels: Any, name: str) -> torch.Tensor:
    y = torch.as_tensor(labels)
    if y.ndim != 1:
        raise PairingError(f"{name} must be a 1-D tensor of class ids, got shape {tuple(y.shape)}")
    if y.numel() == 0:
        raise PairingError(f"{name} is empty: pairing needs at least one sample per class")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise PairingError(f"{name} has dtype {y.dtype}: pass integer class ids (labels.long())")
    return y.long()


class PairingIndex:
    """Class structure of one modality's bank: for each class, the bank indices holding it.

    ``labels`` are the bank's class ids. ``singleton`` says what to do with a class that has a
    single sample (its only partner is itself, so stochastic pairing is fixed pairing there):
    ``"warn"`` (default, a :class:`SingletonClassWarning` naming the classes), ``"error"`` or
    ``"ignore"``. The classes found are in :attr:`classes`, their sizes in :attr:`counts`.
    """

    def __init__(self, labels: Any, *, name: str = "bank", singleton: str = "warn") -> None:
        if singleton not in SINGLETON_POLICIES:
            raise PairingError(f"singleton={singleton!r}: choose one of {SINGLETON_POLICIES}")
        y = _as_labels(labels, f"labels of {name}")
        self.name = name
        self.labels = y
        self.order = torch.argsort(y, stable=True)          # bank indices grouped by class
        self.classes, self.counts = torch.unique(y, return_counts=True)  # sorted classes
        self.starts = torch.cumsum(self.counts, 0) - self.counts
        single = self.classes[self.counts == 1].tolist()
        self.singletons = single
        if single and singleton != "ignore":
            msg = (f"{name}: classes {single} have a single sample, so their partner is always "
                   "that sample (fixed pairing); add samples, merge the classes, or pass "
                   "singleton='ignore' to accept it")
            if singleton == "error":
                raise PairingError(msg)
            warnings.warn(msg, SingletonClassWarning, stacklevel=3)

    def __len__(self) -> int:
        return self.labels.numel()

    def slots(self, query: torch.Tensor, *, query_name: str = "anchor") -> torch.Tensor:
        """Position of each query class in :attr:`classes`; raises if a class is missing."""
        q = _as_labels(query, f"labels of {query_name}")
        pos = torch.searchsorted(self.classes, q).clamp(max=self.classes.numel() - 1)
        missing = self.classes[pos] != q
        if bool(missing.any()):
            absent = sorted(set(q[missing].tolist()))
            raise PairingError(f"classes {absent} occur in {query_name} but not in {self.name}: "
                               "no same-class partner exists; drop those samples or add "
                               f"samples of those classes to {self.name}")
        return pos

    def members(self, cls: int) -> torch.Tensor:
        """Bank indices of class ``cls`` (sorted)."""
        k = int(self.slots(torch.tensor([cls]))[0])
        s = int(self.starts[k])
        return self.order[s:s + int(self.counts[k])]


def pair_indices(index: PairingIndex, query_labels: Any, fixed: torch.Tensor | None = None, *,
                 p_stochastic: float = 1.0, generator: torch.Generator | None = None,
                 query_name: str = "anchor") -> torch.Tensor:
    """Partner index in ``index``'s bank for each query label.

    Each query draws, with probability ``p_stochastic``, a uniform member of its class in the
    bank; otherwise it keeps ``fixed[i]`` (its own partner; required when ``p_stochastic < 1``).
    Draws come from ``generator``, so a seeded generator gives a deterministic sequence.
    """
    p = check_probability(p_stochastic)
    pos = index.slots(torch.as_tensor(query_labels), query_name=query_name)
    n = pos.numel()
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    offset = (u * index.counts[pos].double()).long().clamp_max(index.counts[pos] - 1)
    drawn = index.order[index.starts[pos] + offset]
    if p >= 1.0:
        return drawn
    if fixed is None:
        raise PairingError("p_stochastic < 1 needs the fixed partners (fixed=...) to fall back on")
    fixed = torch.as_tensor(fixed).long()
    if fixed.shape != pos.shape:
        raise PairingError(f"fixed has shape {tuple(fixed.shape)}, expected {tuple(pos.shape)}")
    keep = torch.rand(n, generator=generator, dtype=torch.float64) >= p
    return torch.where(keep, fixed, drawn)


def _check_modalities(modalities: Mapping[str, Any], n: int | None, what: str) -> dict[str, Any]:
    if not isinstance(modalities, Mapping) or not modalities:
        raise PairingError(f"{what} must be a non-empty mapping name -> tensor, e.g. "
                           "{'audio': xa, 'video': xv}")
    out = {}
    for name, x in modalities.items():
        if name == "labels":
            raise PairingError("'labels' is reserved for the class ids: rename that modality")
        length = len(x)
        if n is not None and length != n:
            raise PairingError(f"modality {name!r} has {length} samples but labels has {n}: "
                               "every modality needs one row per sample")
        out[str(name)] = x
    return out


class StochasticPairingDataset(torch.utils.data.Dataset):
    """Map-style dataset over aligned multimodal samples with stochastic same-class pairing.

    ``modalities`` maps a name to a tensor (or any indexable) with one row per sample, aligned
    with ``labels``. Item ``i`` returns the ``anchor`` modality's row ``i``, its label under key
    ``"labels"``, and for every other modality the row of a partner: with probability
    ``p_stochastic`` a uniformly random sample of the same class (drawn afresh at every access),
    otherwise row ``i`` itself. Partners of different modalities are drawn independently.

    Deterministic: the partner of item ``i`` depends only on ``(seed, epoch, i, access count
    of i)``. Call :meth:`set_epoch` each epoch (HF ``Trainer`` does, via accelerate) to make
    runs with ``DataLoader`` workers reproducible as well.
    """

    def __init__(self, modalities: Mapping[str, Any], labels: Any, *, p_stochastic: float = 1.0,
                 anchor: str | None = None, seed: int = 0, singleton: str = "warn") -> None:
        y = _as_labels(labels, "labels")
        self.modalities = _check_modalities(modalities, y.numel(), "modalities")
        self.anchor = anchor if anchor is not None else next(iter(self.modalities))
        if self.anchor not in self.modalities:
            raise PairingError(f"anchor={self.anchor!r} is not a modality; choose one of "
                               f"{list(self.modalities)}")
        self.labels = y
        self.p_stochastic = check_probability(p_stochastic)
        self.seed = int(seed)
        self.epoch = 0
        self.index = PairingIndex(y, name="labels", singleton=singleton)
        self._pos = self.index.slots(y)
        self._draws = torch.zeros(y.numel(), dtype=torch.long)
        self.others = [m for m in self.modalities if m != self.anchor]

    def __len__(self) -> int:
        return self.labels.numel()

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``: partners then depend on it (and reset the access counts)."""
        self.epoch = int(epoch)
        self._draws.zero_()

    def partner(self, i: int, modality_rank: int, draw: int) -> int:
        """Partner of sample ``i`` for the ``modality_rank``-th non-anchor modality at draw
        ``draw`` of the current epoch (pure function of the seed, epoch, i, rank and draw)."""
        g = torch.Generator().manual_seed(
            hash((self.seed, self.epoch, int(i), modality_rank, draw)) & 0x7FFF_FFFF_FFFF_FFFF)
        if self.p_stochastic < 1.0 and float(torch.rand((), generator=g)) >= self.p_stochastic:
            return int(i)
        k = int(self._pos[i])
        count = int(self.index.counts[k])
        off = int(torch.randint(count, (), generator=g))
        return int(self.index.order[int(self.index.starts[k]) + off])

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = int(i)
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} samples")
        i %= len(self)
        draw = int(self._draws[i])
        self._draws[i] += 1
        item = {self.anchor: self.modalities[self.anchor][i]}
        for rank, m in enumerate(self.others):
            item[m] = self.modalities[m][self.partner(i, rank, draw)]
        item["labels"] = self.labels[i]
        return item


class StochasticPairingCollator:
    """``data_collator`` that pairs each anchor sample in a batch with same-class partners.

    ``banks`` maps each partner modality to its samples, ``bank_labels`` holds their classes (one
    per row, shared by all banks, or a mapping modality -> labels). Features are dicts with the
    anchor modality's tensor and ``"labels"``; when a feature already carries a partner modality
    (its fixed partner) it is kept with probability ``1 - p_stochastic``. With
    ``bank_index_key`` set (e.g. ``"index"``), feature ``[bank_index_key]`` is the row of its
    fixed partner in the bank instead. A torch generator seeded by ``seed`` advances every call,
    so partners are resampled every step and the sequence is reproducible.
    Returns a dict of stacked tensors (what HF ``Trainer`` and plain loops expect).
    """

    def __init__(self, banks: Mapping[str, Any], bank_labels: Any, *, p_stochastic: float = 1.0,
                 seed: int = 0, singleton: str = "warn", bank_index_key: str | None = None,
                 ) -> None:
        if not isinstance(banks, Mapping) or not banks:
            raise PairingError("banks must be a non-empty mapping modality -> tensor of samples")
        if isinstance(bank_labels, Mapping):
            missing = [m for m in banks if m not in bank_labels]
            if missing:
                raise PairingError(f"bank_labels has no labels for banks {missing}")
            labels = {m: _as_labels(bank_labels[m], f"bank_labels[{m!r}]") for m in banks}
        else:
            shared = _as_labels(bank_labels, "bank_labels")
            labels = {m: shared for m in banks}
        self.banks = {m: _check_modalities({m: x}, labels[m].numel(), "banks")[m]
                      for m, x in banks.items()}
        self.indices = {m: PairingIndex(labels[m], name=f"bank {m!r}", singleton=singleton)
                        for m in self.banks}
        self.p_stochastic = check_probability(p_stochastic)
        self.bank_index_key = bank_index_key
        self.generator = torch.Generator().manual_seed(int(seed))

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not features:
            raise PairingError("empty batch: the collator needs at least one feature")
        if "labels" not in features[0]:
            raise PairingError("features need a 'labels' entry with the class id")
        y = torch.stack([torch.as_tensor(f["labels"]) for f in features])
        keys = [k for k in features[0] if k != "labels"]
        batch = {k: torch.stack([torch.as_tensor(f[k]) for f in features]) for k in keys
                 if k not in self.banks and k != self.bank_index_key}
        for m, bank in self.banks.items():
            fixed = None
            if self.bank_index_key is not None:
                fixed = torch.as_tensor([int(f[self.bank_index_key]) for f in features])
            has_own = m in features[0]
            if self.p_stochastic < 1.0 and fixed is None and not has_own:
                raise PairingError(f"p_stochastic < 1 but features carry neither {m!r} nor "
                                   "bank_index_key: nothing to keep as the fixed partner")
            idx = pair_indices(self.indices[m], y, fixed if fixed is not None
                               else torch.full_like(y, -1), p_stochastic=self.p_stochastic,
                               generator=self.generator, query_name="batch labels")
            rows = []
            for f, j in zip(features, idx.tolist(), strict=True):
                rows.append(torch.as_tensor(f[m]) if j < 0 else torch.as_tensor(bank[j]))
            batch[m] = torch.stack(rows)
        batch["labels"] = y
        return batch


def all_pair_weights(labels_anchor: Any, index: PairingIndex) -> torch.Tensor:
    """Matrix ``W`` (n_anchor × n_bank) with ``W[i, j] = 1 / n_{y_i}`` when bank sample ``j``
    has anchor ``i``'s class, else 0: the exact stochastic-pairing distribution (rows sum to 1).
    """
    ya = torch.as_tensor(labels_anchor).long()
    pos = index.slots(ya)
    same = ya[:, None] == index.labels[None, :]
    return same.double() / index.counts[pos].double()[:, None]
