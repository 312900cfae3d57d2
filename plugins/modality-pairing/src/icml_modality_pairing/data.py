"""Synthetic multimodal data with controllable class structure and noise, and its preprocessing.

Each modality ``m`` of a sample of class ``y`` is ``mu_m[y] + noise * eps`` with class means
``mu_m[y] ~ N(0, mean_scale^2 I)`` drawn once per dataset, so the modalities are conditionally
independent given the class (the setting where stochastic same-class pairing loses no
information). ``shared_noise`` in [0, 1] mixes a per-sample latent shared by all modalities into the
noise, adding instance-level cross-modal correlation that fixed pairing can use and stochastic
pairing throws away. ``label_noise`` flips that fraction of training labels uniformly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class MultimodalData:
    """Aligned samples: ``modalities[name]`` is (n, d_name), ``labels`` is (n,) int64."""

    modalities: dict[str, torch.Tensor]
    labels: torch.Tensor
    n_classes: int
    info: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.labels.numel()

    def subset(self, idx: torch.Tensor) -> MultimodalData:
        return MultimodalData({k: v[idx] for k, v in self.modalities.items()}, self.labels[idx],
                              self.n_classes, dict(self.info))

    def to(self, device=None, dtype=None) -> MultimodalData:  # noqa: ANN001
        return MultimodalData({k: v.to(device=device, dtype=dtype)
                               for k, v in self.modalities.items()},
                              self.labels.to(device), self.n_classes, dict(self.info))

    @property
    def dims(self) -> dict[str, int]:
        return {k: int(v.shape[1]) for k, v in self.modalities.items()}


def make_synthetic(n_train: int = 2000, n_test: int = 1000, *, n_classes: int = 4,
                   dims: tuple[int, ...] = (16, 16), names: tuple[str, ...] | None = None,
                   mean_scale: float = 0.6, noise: float = 2.0, shared_noise: float = 0.0,
                   label_noise: float = 0.0, seed: int = 0,
                   ) -> tuple[MultimodalData, MultimodalData]:
    """Train and held-out splits of the synthetic multimodal task (float32, CPU).

    Class means and samples come from ``torch.Generator().manual_seed(seed)``, so equal seeds
    give equal data. Classes are balanced (round-robin) before shuffling.
    """
    if n_classes < 2:
        raise ValueError(f"n_classes={n_classes}: need at least 2 classes")
    if n_train < n_classes or n_test < 1:
        raise ValueError(f"n_train={n_train}, n_test={n_test}: need n_train >= n_classes "
                         "and n_test >= 1")
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"dims={dims}: give one positive width per modality")
    if not 0.0 <= shared_noise <= 1.0 or not 0.0 <= label_noise <= 1.0:
        raise ValueError("shared_noise and label_noise must lie in [0, 1]")
    names = tuple(names) if names else tuple("abcdefgh"[i] for i in range(len(dims)))
    if len(names) != len(dims):
        raise ValueError(f"names={names} and dims={dims} differ in length")
    g = torch.Generator().manual_seed(int(seed))
    means = {m: mean_scale * torch.randn(n_classes, d, generator=g) for m, d in zip(names, dims,
                                                                                 strict=True)}
    n = n_train + n_test
    y = torch.arange(n) % n_classes
    y = y[torch.randperm(n, generator=g)]
    latent_dim = max(dims)
    z = torch.randn(n, latent_dim, generator=g)
    mods = {}
    for m, d in zip(names, dims, strict=True):
        own = torch.randn(n, d, generator=g)
        eps = (shared_noise ** 0.5) * z[:, :d] + ((1 - shared_noise) ** 0.5) * own
        mods[m] = means[m][y] + noise * eps
    info = dict(n_classes=n_classes, dims=list(dims), names=list(names), mean_scale=mean_scale,
                noise=noise, shared_noise=shared_noise, label_noise=label_noise, seed=seed)
    full = MultimodalData(mods, y, n_classes, info)
    train = full.subset(torch.arange(n_train))
    test = full.subset(torch.arange(n_train, n))
    if label_noise > 0:
        flip = torch.rand(n_train, generator=g) < label_noise
        train.labels = torch.where(flip, torch.randint(n_classes, (n_train,), generator=g),
                                   train.labels)
    return train, test


@dataclass
class Standardizer:
    """Per-feature z-scoring fitted on the training split only (the preprocessing step)."""

    mean: dict[str, torch.Tensor]
    std: dict[str, torch.Tensor]

    @classmethod
    def fit(cls, data: MultimodalData, eps: float = 1e-8) -> Standardizer:
        return cls({k: v.mean(0) for k, v in data.modalities.items()},
                   {k: v.std(0).clamp_min(eps) for k, v in data.modalities.items()})

    def __call__(self, data: MultimodalData) -> MultimodalData:
        missing = set(self.mean) ^ set(data.modalities)
        if missing:
            raise ValueError(f"modalities {sorted(missing)} differ from the fitted ones")
        return MultimodalData({k: (v - self.mean[k]) / self.std[k]
                               for k, v in data.modalities.items()},
                              data.labels, data.n_classes, dict(data.info))


DIGITS_N = 1797


def make_digits(n_train: int = 1000, n_test: int = 797, *, seed: int = 0,
                ) -> tuple[MultimodalData, MultimodalData]:
    """Two views of a real image dataset: scikit-learn's bundled 8x8 handwritten digits (UCI
    "Optical Recognition of Handwritten Digits", 1,797 images, 10 classes, grey levels 0-16,
    shipped inside the scikit-learn wheel; nothing is downloaded). Modality ``a`` is the left
    half of each image (8 rows x 4 columns, 32 features), ``b`` the right half, both scaled to
    [0, 1]. The halves share the writer's stroke beyond the class, so they are *not*
    conditionally independent given the class.

    The split is a permutation under ``seed``: the first ``n_train`` images train, the next
    ``min(n_test, 1797 - n_train)`` are held out."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:  # pragma: no cover - depends on the environment
        raise ValueError("dataset='digits' needs scikit-learn: pip install scikit-learn") \
            from None
    if not 10 <= n_train <= DIGITS_N - 1 or n_test < 1:
        raise ValueError(f"n_train={n_train}, n_test={n_test}: digits has {DIGITS_N} images; "
                         f"need 10 <= n_train <= {DIGITS_N - 1} and n_test >= 1")
    d = load_digits()
    x = torch.as_tensor(d.images, dtype=torch.float32) / 16.0            # (1797, 8, 8)
    y = torch.as_tensor(d.target, dtype=torch.int64)
    mods = {"a": x[:, :, :4].reshape(len(y), 32), "b": x[:, :, 4:].reshape(len(y), 32)}
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(int(seed)))
    n_test = min(n_test, DIGITS_N - n_train)
    info = dict(dataset="digits", source="sklearn.datasets.load_digits (UCI optdigits test "
                "set, bundled)", views={"a": "left half 8x4", "b": "right half 8x4"},
                n_classes=10, seed=seed)
    full = MultimodalData(mods, y, 10, info)
    return full.subset(perm[:n_train]), full.subset(perm[n_train:n_train + n_test])
