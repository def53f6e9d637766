"""Target features and token ids per KV cache slot, kept alongside the cache.

A streaming window recomputes only each view's newest frame and the tail; the keys and values
of the other frames stay in their ring slots. Their drafter features stay here the same way:
each prefill writes the features of the tokens it runs at their slots, so every prompt slot
holds the features of the pass that wrote its keys and values. A full prefill starts over.
"""

from __future__ import annotations

import torch


class SlotFeatures:
    def __init__(self, capacity: int, feature_size: int, dtype: torch.dtype,
                 device: torch.device | str) -> None:
        self.features = torch.zeros(capacity, feature_size, dtype=dtype,
                                    device=device)  # features: [S, L * H]
        self.ids = torch.zeros(capacity, dtype=torch.long, device=device)  # ids: [S]
        self.written = torch.zeros(capacity, dtype=torch.bool, device=device)  # written: [S]

    def reset(self) -> None:
        self.written.zero_()

    def write(self, slots: torch.Tensor, features: torch.Tensor, ids: torch.Tensor) -> None:
        """slots: [T] long; features: [T, L * H]; ids: [T] long."""
        slots = slots.to(self.features.device)
        self.features.index_copy_(0, slots, features.to(self.features.dtype))
        self.ids.index_copy_(0, slots, ids.to(self.features.device))
        self.written[slots] = True

    def read(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """slots: [C] long -> (features [C, L * H], ids [C])."""
        slots = slots.to(self.features.device)
        if not bool(self.written[slots].all()):
            raise RuntimeError("drafter features requested for cache slots no prefill wrote")
        return self.features[slots], self.ids[slots]
