"""Per-client rank specification: r_i = r_shared + r_personal (light, no torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClientRankSpec:
    """The rank split of one client's single LoRA adapter.

    The first ``r_shared`` rank components (rows of A, columns of B) form the generalized
    subspace that is aggregated by the server; the last ``r_personal`` stay on the client.
    """

    r_shared: int
    r_personal: int = 0

    def __post_init__(self) -> None:
        for name in ("r_shared", "r_personal"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"ClientRankSpec.{name}={value!r} must be an integer >= 0")
        if self.rank == 0:
            raise ValueError("ClientRankSpec needs r_shared + r_personal >= 1 (a rank-0 "
                             "adapter has nothing to train)")

    @property
    def rank(self) -> int:
        """The adapter's total rank r_i = r_shared + r_personal."""
        return self.r_shared + self.r_personal

    def check_dims(self, out_features: int, in_features: int, module: str = "") -> None:
        """Raise if the rank cannot fit a target module of shape (out, in)."""
        limit = min(out_features, in_features)
        if self.rank > limit:
            where = f" {module!r}" if module else ""
            raise ValueError(f"client rank r_shared + r_personal = {self.r_shared} + "
                             f"{self.r_personal} = {self.rank} exceeds the target module"
                             f"{where} of shape ({out_features}, {in_features}); use a total "
                             f"rank <= {limit}")


def parse_ranks(pairs: list[list[int]] | list[tuple[int, int]]) -> list[ClientRankSpec]:
    """``[[r_s, r_p], ...]`` -> specs, with a clear error on a malformed entry."""
    specs = []
    for i, pair in enumerate(pairs):
        if len(pair) != 2:
            raise ValueError(f"client {i}: rank entry {pair!r} must be [r_shared, r_personal]")
        specs.append(ClientRankSpec(int(pair[0]), int(pair[1])))
    if not specs:
        raise ValueError("at least one client rank spec is needed")
    return specs
