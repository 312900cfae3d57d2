"""Config validation and the job's arms (small, seconds)."""

import pytest
from icml_het_cpflora.config import TrainConfig


def test_config_rejects_mismatched_rank_lists():
    with pytest.raises(ValueError, match="one rank per client"):
        TrainConfig(r_shared=[1, 2], r_personal=[1])
    with pytest.raises(ValueError, match="r_shared \\+ r_personal"):
        TrainConfig(r_shared=[0, 2], r_personal=[0, 1])
