"""The Alpamayo model: VLM + action expert + action projections + action space.

State-dict names follow the release checkpoint: `vlm.model.visual.*`,
`vlm.model.language_model.*`, `vlm.lm_head.*`, `expert.*`, `action_in_proj.*`,
`action_out_proj.*`, `action_space.*`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from flashdrive_ros.model.action import ActionInProj, ActionSpace, sample_times, velocity
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.expert import ActionExpert, StagedKV, expert_positions
from flashdrive_ros.model.flow import euler_sample
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.manifest import verify_manifest
from flashdrive_ros.model.unicycle import actions_to_trajectory
from flashdrive_ros.model.vlm import VLM
from flashdrive_ros.model.weights import CONFIG_FILE, WeightsError, expected_shapes, load_state


class AlpamayoModel(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.vlm = VLM(cfg.vision, cfg.text)
        self.expert = ActionExpert(cfg.expert, cfg.text)
        self.action_in_proj = ActionInProj(cfg.action, cfg.expert.hidden_size)
        self.action_out_proj = nn.Linear(cfg.expert.hidden_size, cfg.action.action_dim)
        self.action_space = ActionSpace(cfg.action)

    @property
    def derivable_buffers(self) -> frozenset[str]:
        """Buffers rebuilt from the config; checkpoints may omit them (Alpamayo 1.5 does)."""
        names = [f"action_space.{n}" for n, _ in self.action_space.named_buffers()]
        names += [f"action_in_proj.{n}" for n, _ in self.action_in_proj.named_buffers()]
        return frozenset(names)

    def velocity(self, x_t: torch.Tensor, t: torch.Tensor | float, cache: KVCache,
                 prefix_len: int, positions: torch.Tensor | None = None,
                 prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:
        """x_t: [K, N, 2], t: [K] or scalar -> v: [K, N, 2] (cache: batch 1)."""
        return velocity(self.expert, self.action_in_proj, self.action_out_proj, x_t, t, cache,
                        prefix_len, positions, prefix)

    def velocity_fn(self, cache: KVCache, prefix_len: int, staged: bool = False
                    ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """(x [K, N, 2], t [K]) -> v, with positions and rotated prefix keys made once; staged:
        the prefix copied once into the expert's StagedKV buffers at the first call (for its
        K samples) instead of concatenated at every layer of every call (the same figures)."""
        positions = expert_positions(cache, prefix_len, self.cfg.action.num_waypoints)
        prefix = self.expert.rotated_prefix(cache, prefix_len, self.action_out_proj.weight.dtype)
        if staged:
            return self._over_staged(positions, lambda k_samples: self.expert.stage(
                prefix, k_samples, self.cfg.action.num_waypoints))

        def fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return self.velocity(x, t, cache, prefix_len, positions, prefix)

        return fn

    def detached_velocity_fn(self, cache: KVCache, prefix_len: int, staged: bool = False,
                             num_samples: int = 1
                             ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """`velocity_fn` over copies of the prefix keys, values and positions: the same
        function, unaffected by later writes to `cache`. staged: the copies are the StagedKV
        buffers of num_samples samples, made now (the calls must bring that many)."""
        positions = expert_positions(cache, prefix_len, self.cfg.action.num_waypoints)
        prefix = self.expert.rotated_prefix(cache, prefix_len, self.action_out_proj.weight.dtype)
        if staged:
            made = self.expert.stage(prefix, num_samples, self.cfg.action.num_waypoints)

            def staged_for(k_samples: int) -> list[StagedKV]:
                if k_samples != num_samples:
                    raise ValueError(f"the detached prefix is staged for {num_samples} "
                                     f"samples, the call brings {k_samples}")
                return made

            return self._over_staged(positions, staged_for)
        prefix = [(k.clone(), v.clone()) for k, v in prefix]

        def fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            tokens = self.action_in_proj(x, sample_times(x, t))  # tokens: [K, N, H_exp]
            return self.action_out_proj(
                self.expert.forward_prefix(tokens, positions, prefix)).to(x.dtype)

        return fn

    def _over_staged(self, positions: torch.Tensor,
                     staged_for: Callable[[int], list[StagedKV]]
                     ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The velocity function over StagedKV buffers; staged_for(K) gives those of K
        samples, asked at the first call and whenever K changes."""
        staged: list[StagedKV] = []

        def fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            nonlocal staged
            if not staged or staged[0].keys.shape[0] != x.shape[0]:
                staged = staged_for(x.shape[0])
            tokens = self.action_in_proj(x, sample_times(x, t))  # tokens: [K, N, H_exp]
            return self.action_out_proj(
                self.expert.forward_prefix(tokens, positions, staged)).to(x.dtype)

        return fn

    @torch.no_grad()
    def sample_actions(self, cache: KVCache, prefix_len: int, num_samples: int,
                       generator: torch.Generator, steps: int | None = None) -> torch.Tensor:
        """Plain Euler flow matching -> normalized actions [K, N_wp, 2] float32.

        The samples are integrated in float32 whatever the model dtype.
        """
        a = self.cfg.action
        steps = a.num_flow_steps if steps is None else steps
        return euler_sample(self.velocity_fn(cache, prefix_len), num_samples,
                            (a.num_waypoints, a.action_dim), steps, generator, torch.float32)

    def trajectories(self, actions: torch.Tensor, v0: torch.Tensor | float,
                     forward_only: bool = False) -> torch.Tensor:
        """actions: [K, N, 2] normalized, v0: speed at t0 -> [K, N, 3] (x, y, yaw);
        forward_only: the speed held at zero instead of reversing (unicycle.integrate)."""
        v0 = torch.as_tensor(v0, dtype=torch.float64, device=actions.device)
        return actions_to_trajectory(actions.double(), self.action_space, v0,
                                     self.cfg.action.dt, forward_only)

    @classmethod
    def from_dir(cls, path: str | Path, device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> AlpamayoModel:
        """Build from `path/config.json` and load its safetensors weights (after checking
        `path/manifest.json`, when there is one)."""
        if not dtype.is_floating_point:
            raise ValueError(f"model dtype must be floating point, got {dtype}")
        path = Path(path)
        verify_manifest(path)
        cfg = ModelConfig.load(path / CONFIG_FILE)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device(device):
                model = cls(cfg)
        finally:
            torch.set_default_dtype(previous)
        state = load_state(path, expected_shapes(model), optional=model.derivable_buffers,
                           device=device)
        missing, unexpected = model.load_state_dict(state, strict=False)
        leftover = sorted(set(missing) - model.derivable_buffers) + sorted(unexpected)
        if leftover:
            raise WeightsError(path, [f"state dict mismatch: {leftover[:10]}"])
        return model.eval()
