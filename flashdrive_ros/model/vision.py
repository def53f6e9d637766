"""Qwen3-VL vision encoder: ViT with 2D rotary, 2x2 patch merger and deepstack mergers.

Module names match Hugging Face's `Qwen3VLVisionModel` so checkpoint keys load unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from flashdrive_ros.model.config import VisionConfig
from flashdrive_ros.model.rope import apply_rotary


class VisionPatchEmbed(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.in_channels = cfg.in_channels
        self.kernel = (cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
        self.proj = nn.Conv3d(cfg.in_channels, cfg.hidden_size, kernel_size=self.kernel,
                              stride=self.kernel, bias=True)

    def forward(self, pixel_patches: torch.Tensor) -> torch.Tensor:
        """pixel_patches: [N, C*Tp*P*P] -> [N, hidden]."""
        x = pixel_patches.view(-1, self.in_channels, *self.kernel).to(self.proj.weight.dtype)
        return self.proj(x).flatten(1)


class VisionMLP(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=True)
        self.linear_fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=True)
        self.approximate = _gelu_approximation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.gelu(self.linear_fc1(x), approximate=self.approximate))


class VisionAttention(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(cfg.hidden_size, cfg.hidden_size * 3, bias=True)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=True)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                segment_lengths: list[int]) -> torch.Tensor:
        """x: [N, hidden]; cos, sin: [N, Dh]; attention is within each segment."""
        n = x.shape[0]
        qkv = self.qkv(x).view(n, 3, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        qk = apply_rotary(qkv[:2].float(), cos[None], sin[None]).to(qkv.dtype)  # [2, H, N, Dh]
        q, k, v = qk[0], qk[1], qkv[2]  # q: [H, N, Dh]
        if len(set(segment_lengths)) == 1:
            seg = segment_lengths[0]
            count = n // seg
            q, k, v = (t.view(self.num_heads, count, seg, self.head_dim).transpose(0, 1)
                       for t in (q, k, v))  # q: [count, H, seg, Dh]
            out = F.scaled_dot_product_attention(q, k, v)
            out = out.permute(0, 2, 1, 3).reshape(n, -1)
        else:
            parts = [F.scaled_dot_product_attention(qs, ks, vs).transpose(0, 1)
                     for qs, ks, vs in zip(q.split(segment_lengths, dim=1),
                                           k.split(segment_lengths, dim=1),
                                           v.split(segment_lengths, dim=1))]
            out = torch.cat(parts, dim=0).reshape(n, -1)
        return self.proj(out)


class VisionBlock(nn.Module):
    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attn = VisionAttention(cfg)
        self.mlp = VisionMLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                segment_lengths: list[int]) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, segment_lengths)
        return x + self.mlp(self.norm2(x))


class VisionPatchMerger(nn.Module):
    """Concatenates each merge block's patches and projects them to the LM width."""

    def __init__(self, cfg: VisionConfig, norm_after_concat: bool) -> None:
        super().__init__()
        self.merged_size = cfg.hidden_size * cfg.spatial_merge_size ** 2
        self.norm_after_concat = norm_after_concat
        norm_size = self.merged_size if norm_after_concat else cfg.hidden_size
        self.norm = nn.LayerNorm(norm_size, eps=cfg.layer_norm_eps)
        self.linear_fc1 = nn.Linear(self.merged_size, self.merged_size)
        self.linear_fc2 = nn.Linear(self.merged_size, cfg.out_hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [N_patches, hidden] -> [N_patches / merge^2, out_hidden]."""
        if self.norm_after_concat:
            x = self.norm(x.reshape(-1, self.merged_size))
        else:
            x = self.norm(x).reshape(-1, self.merged_size)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))


class VisionEncoder(nn.Module):
    """forward(pixel_patches, grid_thw) -> (embeds [N_tokens, out_hidden], deepstack list)."""

    def __init__(self, cfg: VisionConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.patch_embed = VisionPatchEmbed(cfg)
        self.pos_embed = nn.Embedding(cfg.num_position_embeddings, cfg.hidden_size)
        self.blocks = nn.ModuleList(VisionBlock(cfg) for _ in range(cfg.depth))
        self.merger = VisionPatchMerger(cfg, norm_after_concat=False)
        self.deepstack_merger_list = nn.ModuleList(
            VisionPatchMerger(cfg, norm_after_concat=True) for _ in cfg.deepstack_visual_indexes)
        rotary_dim = cfg.head_dim // 2
        inv_freq = 1.0 / (cfg.rope_theta ** (
            torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # [Dh / 4]
        self._grid_tables: dict[tuple, tuple[torch.Tensor, ...]] = {}

    def forward(self, pixel_patches: torch.Tensor, grid_thw: torch.Tensor
                ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """pixel_patches: [N_patches, C*Tp*P*P]; grid_thw: [N_img, 3] (t, h, w) in patches."""
        grids = self._check_inputs(pixel_patches, grid_thw)
        x = self.patch_embed(pixel_patches)  # x: [N, hidden]
        tables = [self._tables_for(h, w, x.device) for _, h, w in grids]
        repeats = [t for t, _, _ in grids]
        taps = torch.cat([tb[0].repeat(t, 1) for tb, t in zip(tables, repeats)])
        weights = torch.cat([tb[1].repeat(t, 1) for tb, t in zip(tables, repeats)])
        cos = torch.cat([tb[2].repeat(t, 1) for tb, t in zip(tables, repeats)])
        sin = torch.cat([tb[3].repeat(t, 1) for tb, t in zip(tables, repeats)])
        pos = (self.pos_embed(taps) * weights[:, :, None]).sum(1)
        x = x + pos.to(x.dtype)
        segment_lengths = [h * w for t, h, w in grids for _ in range(t)]
        deepstack = []
        for index, block in enumerate(self.blocks):
            x = block(x, cos, sin, segment_lengths)
            if index in self.cfg.deepstack_visual_indexes:
                level = self.cfg.deepstack_visual_indexes.index(index)
                deepstack.append(self.deepstack_merger_list[level](x))
        return self.merger(x), deepstack

    def tokens_per_image(self, grid_thw: torch.Tensor) -> list[int]:
        merge = self.cfg.spatial_merge_size ** 2
        return [int(t * h * w) // merge for t, h, w in grid_thw.tolist()]

    def _check_inputs(self, pixel_patches: torch.Tensor, grid_thw: torch.Tensor
                      ) -> list[tuple[int, int, int]]:
        cfg = self.cfg
        patch_dim = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size ** 2
        if grid_thw.ndim != 2 or grid_thw.shape[1] != 3 or grid_thw.shape[0] == 0:
            raise ValueError(f"grid_thw must be [N_img, 3], got {tuple(grid_thw.shape)}")
        if pixel_patches.ndim != 2 or pixel_patches.shape[1] != patch_dim:
            raise ValueError(f"pixel_patches must be [N, {patch_dim}], got "
                             f"{tuple(pixel_patches.shape)}")
        grids = [tuple(int(v) for v in row) for row in grid_thw.tolist()]
        m = cfg.spatial_merge_size
        for t, h, w in grids:
            if t <= 0 or h <= 0 or w <= 0 or h % m or w % m:
                raise ValueError(f"grid (t={t}, h={h}, w={w}) must be positive with h, w "
                                 f"multiples of spatial_merge_size {m}")
        total = sum(t * h * w for t, h, w in grids)
        if total != pixel_patches.shape[0]:
            raise ValueError(f"grid_thw describes {total} patches but pixel_patches has "
                             f"{pixel_patches.shape[0]}")
        return grids

    def _tables_for(self, h: int, w: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        """Per-patch (taps [h*w, 4], weights [h*w, 4], cos [h*w, Dh], sin [h*w, Dh])."""
        key = (h, w, str(device))
        if key not in self._grid_tables:
            rows, cols = _merge_order_coords(h, w, self.cfg.spatial_merge_size, device)
            side = int(round(self.cfg.num_position_embeddings ** 0.5))
            row_taps, row_w = _bilinear_taps(rows, h, side)
            col_taps, col_w = _bilinear_taps(cols, w, side)
            taps = (row_taps[:, :, None] * side + col_taps[:, None, :]).reshape(-1, 4)
            weights = (row_w[:, :, None] * col_w[:, None, :]).reshape(-1, 4)
            inv_freq = self.inv_freq.to(device)
            angles = torch.cat([rows[:, None].float() * inv_freq,
                                cols[:, None].float() * inv_freq], dim=-1)  # [h*w, Dh/2]
            angles = torch.cat([angles, angles], dim=-1)  # [h*w, Dh]
            self._grid_tables[key] = (taps, weights, angles.cos(), angles.sin())
        return self._grid_tables[key]


def _merge_order_coords(h: int, w: int, merge: int, device: torch.device
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, col) of each patch in merge-block order, each [h*w] long."""
    rows = torch.arange(h, device=device).view(h // merge, 1, merge, 1)
    cols = torch.arange(w, device=device).view(1, w // merge, 1, merge)
    shape = (h // merge, w // merge, merge, merge)
    return rows.expand(shape).reshape(-1), cols.expand(shape).reshape(-1)


def _bilinear_taps(index: torch.Tensor, size: int, side: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Align-corners bilinear sampling of a `side`-long table at `size` points: taps, weights
    [n, 2]."""
    src = index.float() * (side - 1) / max(size - 1, 1)
    low = src.floor()
    frac = src - low
    taps = torch.stack([low.long(), (low.long() + 1).clamp(max=side - 1)], dim=-1)
    weights = torch.stack([1.0 - frac, frac], dim=-1)
    return taps, weights


def _gelu_approximation(hidden_act: str) -> str:
    if hidden_act in ("gelu_pytorch_tanh", "gelu_tanh"):
        return "tanh"
    if hidden_act == "gelu":
        return "none"
    raise ValueError(f"unsupported vision hidden_act {hidden_act!r}")
