import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Seed for determinism (one thread is the core's pytest plugin's autouse fixture)."""
    torch.manual_seed(0)


@pytest.fixture
def ls_problem():
    from icml_sng import make_least_squares

    return make_least_squares(n=60, p=12, decay=1.0, seed=3)


@pytest.fixture
def regression():
    """A tiny nonlinear least-squares problem: a tanh net fit to sin(3x) on 40 points."""
    g = torch.Generator().manual_seed(0)
    x = torch.linspace(-1, 1, 40, dtype=torch.float64)[:, None]
    y = torch.sin(3 * x).reshape(-1)
    net = torch.nn.Sequential(torch.nn.Linear(1, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
    net = net.double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))

    def residual_fn(idx):
        return net(x[idx]).reshape(-1) - y[idx]

    return net, residual_fn, x.shape[0]
