import pytest

from icml_modality_pairing import running_mean


def test_running_mean_matches_closed_form() -> None:
    assert running_mean([1.0, 2.0, 6.0]) == pytest.approx(3.0)


def test_running_mean_rejects_empty_input() -> None:
    with pytest.raises(ValueError, match="at least one value"):
        running_mean([])
