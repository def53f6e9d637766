"""3D (t, h, w) M-RoPE position ids for prompts with images, as Qwen3-VL assigns them.

Text tokens take the running index on all three axes. An image's tokens take
(start, start + row, start + col) over its merged grid, where start is the running index;
the text after it continues at the image's max position + 1.
"""

from __future__ import annotations

import torch


def image_positions(start: int, grid_thw: tuple[int, int, int], spatial_merge_size: int,
                    device: torch.device | str | None = None) -> torch.Tensor:
    """Positions of one image's tokens in merged-grid raster order: [3, t*h*w / merge^2]."""
    t, h, w = grid_thw
    gh, gw = h // spatial_merge_size, w // spatial_merge_size
    tt = torch.arange(t, device=device).view(t, 1, 1).expand(t, gh, gw)
    hh = torch.arange(gh, device=device).view(1, gh, 1).expand(t, gh, gw)
    ww = torch.arange(gw, device=device).view(1, 1, gw).expand(t, gh, gw)
    return torch.stack([tt, hh, ww]).reshape(3, -1) + start


def text_positions(start: torch.Tensor | int, length: int, batch: int = 1,
                   device: torch.device | str | None = None) -> torch.Tensor:
    """Positions start, start+1, ... on all three axes: [3, B, length].

    start: an int or a LongTensor [B] (e.g. `next_position(...)` of the preceding tokens).
    """
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    start = torch.as_tensor(start, dtype=torch.long, device=device)
    if start.ndim == 0:
        start = start.expand(batch)
    if start.ndim != 1:
        raise ValueError(f"start must be a scalar or [B], got shape {tuple(start.shape)}")
    steps = torch.arange(length, dtype=torch.long, device=start.device)
    return (start[:, None] + steps[None, :]).unsqueeze(0).expand(3, -1, -1).contiguous()


def next_position(positions: torch.Tensor) -> torch.Tensor:
    """positions: [3, B, T] -> the index the next text token takes, max + 1: [B]."""
    if positions.ndim != 3 or positions.shape[0] != 3:
        raise ValueError(f"positions must be [3, B, T], got {tuple(positions.shape)}")
    if positions.shape[2] == 0:
        return torch.zeros(positions.shape[1], dtype=torch.long, device=positions.device)
    return positions.amax(dim=(0, 2)) + 1


def prompt_positions(input_ids: torch.Tensor, grid_thw: torch.Tensor, image_token_id: int,
                     spatial_merge_size: int) -> torch.Tensor:
    """input_ids: [B, T]; grid_thw: [N_img, 3] for all images of the batch in order -> [3, B, T].

    Every run of `image_token_id` tokens is split into consecutive images taking
    t*h*w / merge^2 tokens each; the counts must match exactly.
    """
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must be [B, T], got {tuple(input_ids.shape)}")
    if grid_thw.ndim != 2 or grid_thw.shape[1] != 3:
        raise ValueError(f"grid_thw must be [N_img, 3], got {tuple(grid_thw.shape)}")
    grids = [tuple(int(v) for v in row) for row in grid_thw.tolist()]
    merge2 = spatial_merge_size ** 2
    device = input_ids.device
    out = torch.zeros(3, *input_ids.shape, dtype=torch.long, device=device)
    next_grid = 0
    for b, row in enumerate(input_ids.tolist()):
        pieces = []
        current = 0
        for is_image, start, end in _runs([tok == image_token_id for tok in row]):
            if not is_image:
                pieces.append(text_positions(current, end - start, device=device)[:, 0])
                current += end - start
                continue
            remaining = end - start
            while remaining > 0:
                if next_grid >= len(grids):
                    raise ValueError(f"prompt has more image tokens than the {len(grids)} "
                                     f"images in grid_thw")
                grid = grids[next_grid]
                count = grid[0] * grid[1] * grid[2] // merge2
                if count > remaining:
                    raise ValueError(f"image {next_grid} needs {count} tokens but its run of "
                                     f"image tokens in row {b} has {remaining} left")
                pos = image_positions(current, grid, spatial_merge_size, device)
                pieces.append(pos)
                current = int(pos.max()) + 1
                remaining -= count
                next_grid += 1
        if pieces:
            out[:, b] = torch.cat(pieces, dim=1)
    if next_grid != len(grids):
        raise ValueError(f"grid_thw has {len(grids)} images but the prompt holds {next_grid}")
    return out


def _runs(flags: list[bool]) -> list[tuple[bool, int, int]]:
    """Maximal runs of equal flags: (flag, start, end)."""
    runs = []
    start = 0
    for i in range(1, len(flags) + 1):
        if i == len(flags) or flags[i] != flags[start]:
            runs.append((flags[start], start, i))
            start = i
    return runs
