import pytest
from icml_tipex.runner import TipexRunner
from icml_tipex.scripted import ScriptedModel
from icml_tipex.synthgaia import SynthGAIA


@pytest.fixture(scope="module")
def suite() -> SynthGAIA:
    return SynthGAIA(seed=0)


@pytest.fixture(scope="module")
def runner(suite: SynthGAIA) -> TipexRunner:
    return TipexRunner(ScriptedModel(suite), suite.tools())
