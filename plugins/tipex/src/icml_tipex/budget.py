"""The shared token budget B: no new model call once it is spent. A call is admitted while
spent + outstanding reservations < B and reserves its prompt plus ``max_tokens``; so the total
never exceeds B by more than one call."""

from __future__ import annotations


class BudgetExhausted(RuntimeError):
    """No model call may start: the token budget is spent."""


class TokenBudget:
    """Tokens spent (prompt + completion of finished calls) against an optional limit."""

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"token_budget={limit} must be >= 1 (or None for no limit)")
        self.limit, self.spent, self.reserved = limit, 0, 0

    def reserve(self, tokens: int) -> int:
        """Admit a call that may use up to ``tokens``; raise :class:`BudgetExhausted` if not."""
        if self.limit is not None and self.spent + self.reserved >= self.limit:
            raise BudgetExhausted(f"token budget {self.limit} spent ({self.spent} used, "
                                  f"{self.reserved} reserved by calls in flight)")
        self.reserved += tokens
        return tokens

    def settle(self, reservation: int, used: int) -> None:
        """Replace a reservation by what the call used (0 if it was cancelled or failed)."""
        self.reserved -= reservation
        self.spent += used

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.spent >= self.limit
