"""Training focus on the driving decision a CoC names.

The decision is fixed by the first CoC tokens (the simulator's sentences open with the word of
their decision, so one token); the rest of the sentence is wording. `decisive_lengths` finds,
per window, how many leading CoC tokens it takes until every CoC of the set that starts the
same way names the same decision. The target's CoC loss weighs those tokens `token_weight` times,
and training rows are drawn with weights count(decision) ** -balance, so rare decisions
(follow, slow) are seen more often. Starts from rest (the ego stands, the label is not to
stop) are drawn `start_weight` times as often again: there the decision is in the images
(a green lamp, a crossing left clear) and not in the ego's own motion. The words that name a
side (a bend to the left or right, the side of a parked car) weigh `side_weight` times in the
CoC loss: a bend read on the wrong side is the right decision with a wrong plan. Hard brakes
(the expert's future sheds at least BRAKE_DROP_MPS within BRAKE_HORIZON_S) are drawn
`brake_weight` times as often: a braking lead or a late stop, rare in the data, where a plan
that keeps its speed collides.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from flashdrive_ros.sim.labels import DECISIONS, FILLS, STANDING_MPS

SIDE_WORDS = FILLS["side"]
BRAKE_DROP_MPS = 4.0
BRAKE_HORIZON_S = 3.0


@dataclass(frozen=True)
class DecisionFocus:
    """token_weight: CoC loss weight of the tokens that decide the decision (1: plain mean);
    balance: 0 draws training windows uniformly, 1 draws every decision equally often;
    start_weight: draw weight factor of the starts from rest (1: none);
    side_weight: CoC loss weight of the words that name a side (SIDE_WORDS; 1: none);
    brake_weight: draw weight factor of the hard brakes (1: none)."""

    token_weight: float = 5.0
    balance: float = 0.5
    start_weight: float = 1.0
    side_weight: float = 1.0
    brake_weight: float = 1.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.token_weight) and self.token_weight >= 1.0):
            raise ValueError(f"DecisionFocus.token_weight must be a finite number >= 1, got "
                             f"{self.token_weight}")
        if not 0.0 <= self.balance <= 1.0:
            raise ValueError(f"DecisionFocus.balance must be in [0, 1], got {self.balance}")
        if not (np.isfinite(self.start_weight) and self.start_weight >= 1.0):
            raise ValueError(f"DecisionFocus.start_weight must be a finite number >= 1, got "
                             f"{self.start_weight}")
        for name in ("side_weight", "brake_weight"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 1.0):
                raise ValueError(f"DecisionFocus.{name} must be a finite number >= 1, got "
                                 f"{value}")

    @property
    def uniform(self) -> bool:
        """True when every window is drawn equally often."""
        return self.balance == 0.0 and self.start_weight == 1.0 and self.brake_weight == 1.0

    @property
    def plain_loss(self) -> bool:
        """True when every CoC token weighs the same in the loss."""
        return self.token_weight == 1.0 and self.side_weight == 1.0

    def loss_weights(self, decisive: torch.Tensor, sided: torch.Tensor) -> torch.Tensor | None:
        """decisive, sided: [B, T] bool -> [B, T] float CoC loss weights: token_weight at the
        deciding tokens, side_weight at the side words (the larger where both), 1 elsewhere;
        None when all are 1."""
        if self.plain_loss:
            return None
        return torch.maximum(1.0 + (self.token_weight - 1.0) * decisive.float(),
                             1.0 + (self.side_weight - 1.0) * sided.float())


PLAIN = DecisionFocus(token_weight=1.0, balance=0.0)
STOP = DECISIONS.index("stop")


def decisive_lengths(coc_ids: list[list[int]], decisions: list[int]) -> np.ndarray:
    """[N] int64: per CoC the number of leading tokens after which every CoC of `coc_ids`
    sharing that prefix names the same decision (the whole CoC when none does)."""
    if len(coc_ids) != len(decisions):
        raise ValueError(f"{len(coc_ids)} CoCs but {len(decisions)} decisions")
    named: dict[tuple[int, ...], set[int]] = {}
    for ids, decision in set(zip(map(tuple, coc_ids), map(int, decisions))):
        for end in range(1, len(ids) + 1):
            named.setdefault(ids[:end], set()).add(decision)
    lengths = np.empty(len(coc_ids), dtype=np.int64)
    for i, ids in enumerate(coc_ids):
        prefix = tuple(ids)
        lengths[i] = next((end for end in range(1, len(prefix) + 1)
                           if len(named[prefix[:end]]) == 1), len(prefix))
    return lengths


def row_weights(decision: np.ndarray, balance: float) -> torch.Tensor:
    """[N] float64 sampling weights of the windows: count(decision) ** -balance."""
    counts = Counter(decision.tolist())
    per_class = {d: float(n) ** -balance for d, n in counts.items()}
    return torch.tensor([per_class[d] for d in decision.tolist()], dtype=torch.float64)


def starts_from_rest(decision: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """[N] bool: the ego stands (speed < STANDING_MPS) and the labelled decision is not to
    stop."""
    return (np.asarray(speed) < STANDING_MPS) & (np.asarray(decision) != STOP)


def hard_brakes(speed: np.ndarray, future: np.ndarray, dt: float) -> np.ndarray:
    """speed: [N] m/s at t0; future: [N, N_wp, >= 2] poses every dt s in the t0 frame ->
    [N] bool: the future's speed falls BRAKE_DROP_MPS or more below `speed` within
    BRAKE_HORIZON_S."""
    steps = int(round(BRAKE_HORIZON_S / dt))
    xy = np.asarray(future, dtype=np.float64)[:, :steps, :2]
    path = np.concatenate([np.zeros_like(xy[:, :1]), xy], axis=1)  # path: [N, steps + 1, 2]
    future_speed = np.linalg.norm(np.diff(path, axis=1), axis=2) / dt  # [N, steps]
    if future_speed.shape[1] == 0:
        return np.zeros(len(xy), dtype=bool)
    return np.asarray(speed) - future_speed.min(axis=1) >= BRAKE_DROP_MPS


def draw_weights(decision: np.ndarray, speed: np.ndarray, focus: DecisionFocus,
                 brakes: np.ndarray | None = None, paired: np.ndarray | None = None
                 ) -> torch.Tensor:
    """[N] float64 sampling weights: row_weights times start_weight on the starts from
    rest and on the lamp-pair windows (`paired`, [N] bool: both lamps of a pair, so that its
    red window is drawn as often as its green one; none when None) and brake_weight on the
    hard brakes (`brakes`, [N] bool; none when None)."""
    started = starts_from_rest(decision, speed)
    if paired is not None:
        started = started | np.asarray(paired, dtype=bool)
    factor = np.where(started, focus.start_weight, 1.0)
    if brakes is not None:
        factor = factor * np.where(brakes, focus.brake_weight, 1.0)
    return row_weights(decision, focus.balance) * torch.from_numpy(factor)


def _share(weights: torch.Tensor, mask: np.ndarray) -> float:
    """Expected share of the rows in `mask` ([N] bool) among rows drawn with `weights`."""
    total = float(weights.sum())
    if total <= 0:
        return 0.0
    return round(float(weights.numpy()[np.asarray(mask)].sum()) / total, 4)


def drawn_share(mask: np.ndarray, decision: np.ndarray, speed: np.ndarray,
                focus: DecisionFocus, brakes: np.ndarray | None = None,
                paired: np.ndarray | None = None) -> float:
    """Expected share of the rows in `mask` ([N] bool) among the drawn rows."""
    return _share(draw_weights(decision, speed, focus, brakes, paired), mask)


def decision_shares(decision: np.ndarray, speed: np.ndarray, focus: DecisionFocus,
                    names: tuple[str, ...], brakes: np.ndarray | None = None,
                    paired: np.ndarray | None = None) -> dict[str, float]:
    """Expected share of each decision among the drawn rows."""
    weights = draw_weights(decision, speed, focus, brakes, paired)
    return {name: _share(weights, decision == i) for i, name in enumerate(names)}


def start_share(decision: np.ndarray, speed: np.ndarray, focus: DecisionFocus,
                brakes: np.ndarray | None = None, paired: np.ndarray | None = None) -> float:
    """Expected share of the starts from rest among the drawn rows."""
    return drawn_share(starts_from_rest(decision, speed), decision, speed, focus, brakes,
                       paired)
