"""An optimizer's state as safetensors-ready tensors plus a JSON-able rest (no pickle).

Per-parameter state tensors become `opt.<index>.<name>` (index as in `state_dict()`); scalar
non-tensor state and the parameter groups go to the JSON part.
"""

from __future__ import annotations

import torch

PREFIX = "opt."


def optimizer_state(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    state = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, float | int | bool | None]] = {}
    for index, entries in state["state"].items():
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{PREFIX}{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(index), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def load_optimizer_state(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                         meta: dict) -> None:
    """Restores what `optimizer_state` wrote into an optimizer over the same parameters."""
    groups = meta["param_groups"]
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in opt.param_groups]:
        raise ValueError("the saved optimizer state belongs to other parameters")
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith(PREFIX):
            index, name = key[len(PREFIX):].split(".", 1)
            state.setdefault(int(index), {})[name] = value
    for index, entries in meta["scalars"].items():
        state.setdefault(int(index), {}).update(entries)
    for group in groups:
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
    opt.load_state_dict({"state": state, "param_groups": groups})
