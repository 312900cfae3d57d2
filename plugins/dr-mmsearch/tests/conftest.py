import pytest


@pytest.fixture(scope="session")
def world():
    from icml_dr_mmsearch.config import WorldConfig
    from icml_dr_mmsearch.experiment import build_world

    return build_world(WorldConfig(n_entities=24, world_seed=0))


@pytest.fixture(scope="session")
def kb(world):
    return world[0]


@pytest.fixture(scope="session")
def env(world):
    return world[1]


@pytest.fixture(scope="session")
def tok(world):
    return world[2]


@pytest.fixture
def tiny(tok):
    from icml_dr_mmsearch.experiment import make_tiny_model

    return make_tiny_model(len(tok), hidden_size=32, seed=0)


@pytest.fixture(scope="session")
def warm(world):
    """A tiny Qwen2 briefly warm-started on gold trajectories (searches, copies names)."""
    import torch
    from icml_dr_mmsearch.experiment import make_tiny_model
    from icml_dr_mmsearch.grpo import warm_start

    kb, env, tok = world
    torch.set_num_threads(1)
    model = make_tiny_model(len(tok), hidden_size=32, seed=0)
    warm_start(model, tok, env, kb.questions, steps=60, batch_size=16, learning_rate=5e-3)
    return model


def _play(env, q, responses, group=0):
    from icml_dr_mmsearch.rollout import Trajectory

    t = Trajectory(q, env.reset(q), group)
    for r in responses:
        if env.step(t.episode, r) is None:
            break
    return t


@pytest.fixture
def play():
    """``play(env, q, responses)``: a Trajectory from given model turns (no model), through the
    real environment."""
    return _play
