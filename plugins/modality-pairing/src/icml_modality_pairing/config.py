"""Typed configs, one per capability. :class:`Settings` is what the experiment's functions take
and :class:`TrainConfig` extends it, so each default is written once; field names are the CLI's
--set keys and match the Python API's keyword arguments (p_stochastic, fusion, power_iters, tol,
rho, sigma, ...)."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option

FUSIONS = ("add", "concat")
SCHEDULES = ("cosine", "constant")
DATASETS = ("synthetic", "digits")


@dataclass
class Settings:
    """Data, model, optimiser and measurement settings shared by all arms: what
    :func:`~icml_modality_pairing.experiment.run_arm` and
    :func:`~icml_modality_pairing.experiment.make_data` take (the train job's config is one)."""

    p_stochastic: float = option(1.0, help="probability of a random same-class partner in the "
                                 "stochastic arm (0 = fixed pairing)", ge=0, le=1)
    n_test: int = option(1000, help="held-out samples (accuracy and sharpness; digits: at most "
                         "the samples left after the training split)", ge=1)
    dataset: str = option("synthetic", help="synthetic (Gaussian modalities, the knobs below) or "
                          "digits (sklearn's 8x8 digits, left half = modality a, right half = b; "
                          "needs scikit-learn)", choices=DATASETS)
    n_classes: int = option(4, help="classes of the synthetic task", ge=2)
    dim: int = option(16, help="width of each modality's features", ge=1)
    mean_scale: float = option(0.6, help="std of the class means (class separation)", gt=0)
    noise: float = option(2.0, help="per-sample noise std", ge=0)
    shared_noise: float = option(0.0, help="fraction of the noise shared across modalities: a "
                                 "latent beyond the class, so conditional independence given "
                                 "the class fails by this within-class correlation (only fixed "
                                 "pairing can use it)", ge=0, le=1)
    label_noise: float = option(0.0, help="fraction of training labels resampled uniformly",
                                ge=0, le=1)
    fusion: str = option("add", help="late fusion: add (z = Σ e_m) or concat", choices=FUSIONS)
    width: int = option(64, help="encoder width", ge=1)
    hidden: int = option(64, help="head hidden width (0: linear head)", ge=0)
    batch_size: int = option(50, help="training batch size", ge=1)
    lr: float = option(0.05, help="SGD learning rate", gt=0)
    momentum: float = option(0.9, help="SGD momentum", ge=0, lt=1)
    weight_decay: float = option(5e-4, help="SGD weight decay", ge=0)
    schedule: str = option("cosine", help="learning-rate schedule", choices=SCHEDULES)
    noise_scale: float = option(1.0, help="noise arm: std of the Gaussian noise on modality b "
                                "as a multiple of the matched std (that of the swap x_b^j - x_b^i "
                                "stochastic pairing makes, per feature)", ge=0)
    sam_rho: float = option(0.05, help="sam arm: SAM radius (matched to the ε-sharpness radius "
                            "rho the table measures)", ge=0)
    mixup_alpha: float = option(1.0, help="mixup arm: Beta(α, α) weight of within-class mixup "
                                "(both modalities mixed with one same-class sample)", gt=0)
    eig_method: str = option("lanczos", help="λ_max by lanczos (largest eigenvalue) or power "
                             "(dominant eigenvalue, PyHessian's stopping rule)",
                             choices=("lanczos", "power"))
    power_iters: int = option(100, help="max Hessian-vector products for λ_max", ge=1)
    tol: float = option(1e-4, help="relative tolerance of the eigensolver", gt=0)
    trace_samples: int = option(16, help="Hutchinson probes for the trace (0: skip)", ge=0)
    rho: float = option(0.05, help="radius of the ε-sharpness ascent step", ge=0)
    sigma: float = option(0.05, help="relative std of the Gaussian perturbation", ge=0)
    gauss_samples: int = option(20, help="draws for the Gaussian-perturbation sharpness", ge=1)


@dataclass
class TrainConfig(Settings):
    """The default job: regimes x seeds x arms, each arm trained and measured with the
    :class:`Settings` this config extends (``run_arm(arm, n, epochs, seed, config)``)."""

    regimes: list[str] = option(["2000x15", "400x150"], help="regimes '<n_train>x<epochs>': "
                                "moderate data and short training, small data and long training")
    seeds: int = option(3, help="seeds per regime and arm (seed, seed+1, ...)", ge=1)
    arms: list[str] = option(["unimodal", "fixed", "stochastic"], help="arms to train: "
                             "unimodal (anchor modality only), fixed, stochastic pairing, "
                             "unimodal_b (the other modality only); controls on the fusion "
                             "network: const_b (b replaced by a constant), twin_a (b replaced "
                             "by a second view of a, stochastically paired), noise, sam, mixup "
                             "(fixed pairing plus matched noise on b, SAM, within-class mixup)")
    landscape_steps: int = option(21, help="points of the 1-D filter-normalised slice (0: "
                                  "no plot)", ge=0)
    landscape_span: float = option(1.0, help="half-width of the slices in filter-normalised "
                                   "units", gt=0)
    surface_steps: int = option(11, help="grid side of the 2-D slice (0: no 2-D plot)", ge=0)
    save_model: bool = option(True, help="save the stochastic arm's first model as model.pt "
                              "(input of the evaluate hook)")


@dataclass
class EvaluateConfig:
    model_path: str = option("", help="model.pt written by the train hook or save_model(); "
                             "empty: train a stochastic-pairing model on the default data first")
    n_train: int = option(2000, help="training samples of the synthetic data (data of a "
                          "saved model are read from its file)", ge=2)
    epochs: int = option(15, help="epochs when training a model here", ge=1)
    n_test: int = option(1000, help="held-out samples the suite measures on", ge=1)
    power_iters: int = option(100, help="max power iterations", ge=1)
    tol: float = option(1e-4, help="relative tolerance of power iteration and Lanczos", gt=0)
    lanczos_iters: int = option(40, help="Lanczos steps (0: skip)", ge=0)
    trace_samples: int = option(32, help="Hutchinson probes (0: skip)", ge=0)
    rho: float = option(0.05, help="ε-sharpness radius", ge=0)
    sigma: float = option(0.05, help="relative std of the Gaussian perturbation", ge=0)
    gauss_samples: int = option(20, help="draws for the Gaussian-perturbation sharpness", ge=1)
    landscape_steps: int = option(21, help="points of the 1-D slice (0: no plot)", ge=0)
    landscape_span: float = option(1.0, help="half-width of the slices", gt=0)
    surface_steps: int = option(11, help="grid side of the 2-D slice (0: no plot)", ge=0)


@dataclass
class DifferentiateConfig:
    model_path: str = option("", help="model.pt to differentiate; empty: a small trained "
                             "late-fusion model whose Hessian fits in memory")
    width: int = option(8, help="encoder width of the small model", ge=1)
    hidden: int = option(8, help="head hidden width of the small model", ge=0)
    n_train: int = option(1000, help="training samples for the small model", ge=2)
    epochs: int = option(10, help="training epochs for the small model", ge=0)
    n_test: int = option(500, help="held-out samples the loss is measured on", ge=1)
    power_iters: int = option(500, help="max power iterations", ge=1)
    tol: float = option(1e-6, help="relative tolerance of power iteration and Lanczos", gt=0)
    lanczos_iters: int = option(80, help="max Lanczos steps", ge=1)
    trace_samples: int = option(64, help="Hutchinson probes", ge=1)
    fd_step: float = option(1e-6, help="step of the float64 central finite difference of "
                            "gradients along a unit vector (small: ReLU kinks)", gt=0)
    max_explicit: int = option(3000, help="largest parameter count for the explicit Hessian "
                               "check (eigvalsh, trace, H@v)", ge=0)
    backend: str = option("autograd", help="HVP backend: autograd (cached double backward) or "
                          "func (torch.func jvp over grad)", choices=("autograd", "func"))
