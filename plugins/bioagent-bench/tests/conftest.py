import pytest


@pytest.fixture(scope="session")
def suite(tmp_path_factory):
    """All four tasks under all four conditions, generated once per session."""
    from icml_bioagent_bench.suite import make_suite

    return make_suite(tmp_path_factory.mktemp("suite"), seed=0)


@pytest.fixture()
def sandbox(tmp_path):
    return tmp_path / "runs"


# Runs in these tests are bounded by their work (pipeline steps, LLM turns and tokens), never
# by this machine's speed: no wall-clock limit unless a test sets one to test it.
UNTIMED_S = float("inf")


@pytest.fixture(autouse=True)
def _no_wall_clock_limit(monkeypatch):
    """Lift the default 120 s limit of ``run_agent`` and ``evaluate_suite`` (a loaded machine
    made slow runs fail); tests of the limits pass their own ``Limits``."""
    from icml_bioagent_bench import harness, suite
    from icml_bioagent_bench.workspace import Limits

    for fn in (harness.run_agent, suite.evaluate_suite):
        monkeypatch.setitem(fn.__kwdefaults__, "limits", Limits(time_s=UNTIMED_S))
