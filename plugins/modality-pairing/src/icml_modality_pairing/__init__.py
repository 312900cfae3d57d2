"""Multimodal learning as convolutional smoothing, and stochastic modality pairing.

Public API (torch is imported on first use, not at import time)::

    from icml_modality_pairing import StochasticPairingDataset, hessian_top_eigenvalue
    ds = StochasticPairingDataset({"audio": xa, "video": xv}, labels, p_stochastic=1.0, seed=0)
    top = hessian_top_eigenvalue(model, loss_fn, heldout_batches, iters=100, tol=1e-4)
"""

from __future__ import annotations

from icml.lazy import lazy_exports

__version__ = "0.1.3"

_EXPORTS = {
    # stochastic modality pairing
    "StochasticPairingDataset": "pairing", "StochasticPairingCollator": "pairing",
    "PairingIndex": "pairing", "pair_indices": "pairing", "all_pair_weights": "pairing",
    "PairingError": "pairing", "SingletonClassWarning": "pairing",
    "check_probability": "pairing",
    # data and reference models
    "MultimodalData": "data", "make_synthetic": "data", "Standardizer": "data",
    "LateFusion": "models", "Unimodal": "models", "build_model": "models",
    "save_model": "models", "load_model": "models",
    # training loop and experiment
    "train_model": "training", "accuracy": "training", "cross_entropy_loss": "training",
    "heldout_batches": "training", "exact_pairing_loss": "training",
    "ARMS": "training", "Settings": "config", "TrainConfig": "config",
    "run_arm": "experiment", "make_data": "experiment",
    # sharpness suite
    "Objective": "objective", "as_batch_loss": "objective", "SharpnessError": "objective",
    "hvp": "hessian", "hessian_top_eigenvalue": "hessian", "hessian_trace": "hessian",
    "power_iteration": "hessian", "lanczos": "hessian", "EigenResult": "hessian",
    "TraceResult": "hessian", "ConvergenceError": "hessian", "ConvergenceWarning": "hessian",
    "epsilon_sharpness": "sharpness", "gaussian_perturbation_sharpness": "sharpness",
    "sharpness_report": "sharpness",
    "filter_normalized_direction": "landscape", "loss_landscape_1d": "landscape",
    "loss_landscape_2d": "landscape", "plot_landscape_1d": "landscape",
    "plot_landscape_2d": "landscape",
    # convolutional smoothing
    "smooth": "smoothing", "Smoothed": "smoothing", "smoothed_abs": "smoothing",
    "smoothed_abs_curvature": "smoothing",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
