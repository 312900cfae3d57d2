"""icml-sng: subsampled natural gradient (SNG) and SPRING as sketch-and-project.

Public API (loaded lazily, so ``import icml_sng`` does not import torch)::

    from icml_sng import SNG, SPRING, least_squares_loss   # torch.optim optimizers
    from icml_sng import sketch_direction                  # the k x k damped solve
    from icml_sng import sample_svs, svs_preconditioner    # squared volume sampling
    from icml_sng import nesterov_kaczmarz, accelerated_sketch_project, spring_parameters
    from icml_sng import PoissonPINN, mlp, make_least_squares
"""

from __future__ import annotations

from icml.lazy import lazy_exports

__version__ = "0.4.4"

_EXPORTS = {
    "SNG": "optim", "SPRING": "optim", "NonFiniteError": "optim", "ResidualProblem": "optim",
    "least_squares_loss": "optim", "DEFAULTS": "optim", "SPRING_DEFAULTS": "optim",
    "SPRING_VMC": "optim", "forward_laplacian": "pinn",
    "one_hidden_layer_jacobian": "pinn",
    "residual_jacobian": "optim", "uniform_sampler": "optim",
    "sketch_direction": "sketch", "projection_matrix": "sketch",
    "sample_svs": "svs", "sample_svs_many": "svs", "svs_preconditioner": "svs",
    "svs_expected_projection": "svs",
    "svs_rate": "svs", "svs_nu_exact": "svs", "svs_weights": "svs", "svs_enumerate": "svs",
    "svs_expectations_exact": "svs", "elementary_symmetric": "svs",
    "kaczmarz": "accelerated", "nesterov_kaczmarz": "accelerated",
    "accelerated_sketch_project": "accelerated", "spring_parameters": "accelerated",
    "theoretical_parameters": "accelerated", "momentum_from_rate": "accelerated",
    "LeastSquaresProblem": "least_squares", "make_least_squares": "least_squares",
    "PoissonPINN": "pinn", "mlp": "pinn", "exact_solution": "pinn",
    "History": "train", "fit_pinn": "train", "fit_least_squares": "train",
    "tuned_sgd": "train", "make_optimizer": "train",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
