"""flwr stays out of every process that does not ask for the Flower backend, and where it is
imported it leaves the global numeric state alone. (flwr's import does have global effects:
it imports ``logging.handlers`` and ~400 other modules, its ``rich`` import draws from Python's
global ``random`` stream, and it sets ``GRPC_VERBOSITY``. The first one changed fptquant's
training text in the same process until fptquant collected that text in a fresh interpreter.)
Each check runs in a fresh interpreter: this process may already hold flwr."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_LIGHT = """
import sys
import icml_het_cpflora, icml_het_cpflora.plugin, icml_het_cpflora.simulator
import icml_het_cpflora.strategies, icml_het_cpflora.job
print(sorted(m for m in sys.modules if m == "flwr" or m.startswith(("flwr.", "ray"))))
"""

_STATE = """
import hashlib, json, pickle
import numpy as np, torch

def state():
    return {"torch_rng": hashlib.sha256(torch.random.get_rng_state().numpy().tobytes()).hexdigest(),
            "numpy_rng": hashlib.sha256(pickle.dumps(np.random.get_state())).hexdigest(),
            "threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
            "dtype": str(torch.get_default_dtype()),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "matmul_precision": torch.get_float32_matmul_precision(),
            "grad": torch.is_grad_enabled(), "numpy_err": np.geterr()}

before = state()
import icml_het_cpflora.flower  # noqa: F401  (imports flwr.app, flwr.clientapp, flwr.serverapp)
print(json.dumps([before, state()]))
"""


def _child(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return out.stdout.strip().splitlines()[-1]


def test_without_the_flower_backend_flwr_is_not_imported():
    assert json.loads(_child(_LIGHT).replace("'", '"')) == []


def test_importing_the_flower_backend_keeps_numeric_global_state():
    pytest.importorskip("flwr", minversion="1.42", reason="needs flwr (extra [flower])")
    before, after = json.loads(_child(_STATE))
    assert after == before
