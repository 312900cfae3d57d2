import os
from collections.abc import Iterator

import pytest
from icml_tipex.clock import ENGINES
from icml_tipex.runner import TipexRunner
from icml_tipex.scripted import ScriptedModel
from icml_tipex.synthgaia import SynthGAIA


@pytest.fixture(scope="module")
def suite() -> SynthGAIA:
    return SynthGAIA(seed=0)


@pytest.fixture(scope="module")
def runner(suite: SynthGAIA) -> TipexRunner:
    return TipexRunner(ScriptedModel(suite), suite.tools())


@pytest.fixture(scope="module", params=ENGINES)
def both_engines(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run every test of a module on each virtual-clock engine ("sim", "asyncio") through
    ``TIPEX_ENGINE`` (the engine used wherever none is given). A module opts in with
    ``pytestmark = pytest.mark.usefixtures("both_engines")``; the value is the engine's name."""
    old = os.environ.get("TIPEX_ENGINE")
    os.environ["TIPEX_ENGINE"] = request.param
    yield request.param
    if old is None:
        os.environ.pop("TIPEX_ENGINE", None)
    else:
        os.environ["TIPEX_ENGINE"] = old
