import pytest


@pytest.fixture(scope="session")
def suite(tmp_path_factory):
    """All four tasks under all four conditions, generated once per session."""
    from icml_bioagent_bench.suite import make_suite

    return make_suite(tmp_path_factory.mktemp("suite"), seed=0)


@pytest.fixture()
def sandbox(tmp_path):
    return tmp_path / "runs"
