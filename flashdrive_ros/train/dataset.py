"""Training windows as tensors: frames stored once per drive step, windows index into them.

`TrainSet.build` turns drives into: all frames [S_total, N_cam, H, W, 3] uint8, per window the
global indices of its F frames, the 48 ego-history token ids, the CoC ids (text, then
`<|cot_end|>` `<|traj_future_start|>`), the normalized future actions, v0, the future poses,
the decision and how many leading CoC tokens decide it (train/decision_focus.py), and the
expert's scene readings (train/scene_readout.py). A drive's contrasts (train/drive.py) add
windows after all the drives' own: the same frames and history as the step's own window with
the contrast's CoC and future, flagged `contrast`; their CoC carries no labels (the pictures
do not tell which of the two CoCs is right), so only the action expert learns from them.
`batch(rows)` assembles prompt + CoC token rows, image patches and 3D positions for the
backbone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.history import HistoryTokenizer
from flashdrive_ros.model.positions import prompt_positions
from flashdrive_ros.model.preprocess import normalize, patchify
from flashdrive_ros.model.prompt import PromptBuilder
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.sim.lamp_pairs import LAMP_PAIR_TAG
from flashdrive_ros.train.actions import (
    action_stats,
    future_controls,
    history_v0,
    normalize_controls,
)
from flashdrive_ros.train.decision_focus import SIDE_WORDS, decisive_lengths
from flashdrive_ros.train.drive import SCENE_COLUMNS, Drive, to_ego_frame

IGNORE = -100


@dataclass
class TrainBatch:
    """input_ids: [B, T] prompt + CoC (padded); labels: [B, T] next-token targets on the CoC
    (IGNORE elsewhere); positions: [3, B, T]; pixel_patches / grid_thw: the B * V * F images in
    prompt order; seq_lens: [B] valid tokens (prompt + CoC); actions: [B, N_wp, 2]; decisive:
    [B, T] bool, True at the label positions of the CoC tokens that decide the decision;
    sided: [B, T] bool, True at the label positions of the CoC's side words (SIDE_WORDS);
    scene: [B, 4] float32 the expert's readings (SCENE_COLUMNS); coc_start: first label column
    (None without CoC); seq_bounds: (min, max) of seq_lens, read on the host. grid_thw stays
    on the CPU (the vision encoder reads it there)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    positions: torch.Tensor
    pixel_patches: torch.Tensor
    grid_thw: torch.Tensor
    seq_lens: torch.Tensor
    actions: torch.Tensor
    rows: torch.Tensor
    decisive: torch.Tensor
    sided: torch.Tensor
    scene: torch.Tensor
    coc_start: int | None = None
    seq_bounds: tuple[int, int] | None = None


class TrainSet:
    def __init__(self, cfg: ModelConfig, tokenizer: TextTokenizer, frames: torch.Tensor,
                 frame_stamps: np.ndarray, frame_index: torch.Tensor, history: np.ndarray,
                 coc_ids: torch.Tensor,
                 coc_lens: torch.Tensor, actions: torch.Tensor, v0: np.ndarray,
                 future: np.ndarray, decision: np.ndarray, drive_of: np.ndarray,
                 step_of: np.ndarray, stats: dict[str, float],
                 decisive_lens: np.ndarray, side_cols: torch.Tensor,
                 lamp_pair: np.ndarray, scene: np.ndarray, contrast: np.ndarray) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.frames = frames  # [S_total, V, H, W, 3] uint8
        self.frame_stamps = frame_stamps  # [S_total] seconds
        self.frame_index = frame_index  # [N, F] long
        self.history = history  # [N, N_hist, 4]
        self.coc_ids = coc_ids  # [N, M] long
        self.coc_lens = coc_lens  # [N] long
        self.actions = actions  # [N, N_wp, 2] float32
        self.v0 = v0  # [N]
        self.future = future  # [N, N_wp, 3]
        self.decision = decision  # [N]
        self.drive_of = drive_of  # [N]
        self.step_of = step_of  # [N]
        self.stats = stats
        self.decisive_lens = torch.as_tensor(decisive_lens, dtype=torch.long)  # [N]
        self.side_cols = side_cols  # [N, M] bool: coc_ids columns holding a side word
        self.lamp_pair = lamp_pair  # [N] bool: windows of lamp pairs
        self.scene = torch.as_tensor(scene, dtype=torch.float32)  # [N, 4] SCENE_COLUMNS
        self.contrast = contrast  # [N] bool: contrast windows (no CoC labels)
        self.builder = PromptBuilder(cfg, tokenizer)
        hist_tok = HistoryTokenizer(cfg.action, tokenizer.traj_token_start)
        self.history_ids = torch.as_tensor(
            np.stack([hist_tok.encode(h[:, :3]) for h in history]) if len(history)
            else np.zeros((0, hist_tok.num_tokens), dtype=np.int64))
        self.prompt_ids = torch.tensor(self.builder.build().token_ids, dtype=torch.long)
        self.pad_id = tokenizer.token_id("<|endoftext|>")
        self.image_token_id = tokenizer.token_id("<|image_pad|>")
        self._positions: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return self.frame_index.shape[0]

    def own_rows(self) -> torch.Tensor:
        """[N_own] long: the rows that are not contrast windows (all of them come first)."""
        return torch.as_tensor(np.flatnonzero(~self.contrast), dtype=torch.long)

    @property
    def prompt_len(self) -> int:
        return self.prompt_ids.shape[0]

    @classmethod
    def build(cls, cfg: ModelConfig, tokenizer: TextTokenizer, drives: list[Drive],
              stats: dict[str, float] | None = None,
              device: torch.device | str = "cpu") -> TrainSet:
        """`stats`: action normalization; computed from these windows when None."""
        a, p = cfg.action, cfg.prompt
        cot_end = tokenizer.token_id("cot_end")
        future_start = tokenizer.token_id("traj_future_start")
        frames, stamps, frame_index, history, coc, sides, future = [], [], [], [], [], [], []
        decision, drive_of, step_of, lamp_pair, scene = [], [], [], [], []
        offsets = np.cumsum([0] + [drive.num_steps for drive in drives])
        windows = []
        for d_index, drive in enumerate(drives):
            if drive.expert_future.shape[1] != a.num_waypoints:
                raise ValueError(f"drive {drive.seed} has {drive.expert_future.shape[1]} future "
                                 f"waypoints, the model plans {a.num_waypoints}")
            frames.append(drive.frames)
            stamps.append(drive.stamps)
            steps = drive.window_steps(p.num_frames, a.num_history)
            windows += [(d_index, int(step), None) for step in steps]
            windows += [(d_index, int(step), c) for c, step in enumerate(drive.contrast_step)
                        if step in steps]
        windows.sort(key=lambda w: w[2] is not None)
        for d_index, step, c in windows:
            drive = drives[d_index]
            frame_index.append(offsets[d_index] + np.arange(step - p.num_frames + 1, step + 1))
            history.append(to_ego_frame(drive.poses[step - a.num_history + 1:step + 1],
                                        drive.poses[step]))
            text = drive.coc[step] if c is None else drive.contrast_coc[c]
            ids, marks = tokenizer.encode_marking(text, SIDE_WORDS)
            coc.append(ids[:p.max_coc_tokens - 1] + [cot_end, future_start])
            sides.append(marks[:p.max_coc_tokens - 1] + [False, False])
            future.append(drive.expert_future[step] if c is None else drive.contrast_future[c])
            decision.append(int(drive.decision[step] if c is None
                                else drive.contrast_decision[c]))
            drive_of.append(d_index)
            step_of.append(step)
            lamp_pair.append(c is None and LAMP_PAIR_TAG in drive.tags[step].split(","))
            scene.append(drive.scene[step])
        history_arr = np.asarray(history, dtype=np.float64).reshape(-1, a.num_history, 4)
        future_arr = np.asarray(future, dtype=np.float64).reshape(-1, a.num_waypoints, 3)
        v0 = history_v0(history_arr, a.history_dt) if len(history_arr) else np.zeros(0)
        controls = future_controls(future_arr, v0, a.dt)
        stats = action_stats(controls) if stats is None else stats
        width = max((len(c) for c in coc), default=2)
        coc_ids = torch.full((len(coc), width), tokenizer.token_id("<|endoftext|>"),
                             dtype=torch.long)
        side_cols = torch.zeros(coc_ids.shape, dtype=torch.bool)
        for i, (ids, marks) in enumerate(zip(coc, sides)):
            coc_ids[i, :len(ids)] = torch.tensor(ids)
            side_cols[i, :len(marks)] = torch.tensor(marks, dtype=torch.bool)
        all_frames = np.concatenate(frames) if frames else np.zeros((0,), np.uint8)
        all_stamps = np.concatenate(stamps) if stamps else np.zeros(0)
        decisive = decisive_lengths([ids[:-2] for ids in coc], decision)
        return cls(cfg, tokenizer, torch.from_numpy(all_frames).to(device), all_stamps,
                   torch.as_tensor(np.asarray(frame_index, dtype=np.int64)).reshape(
                       -1, p.num_frames),
                   history_arr, coc_ids, torch.tensor([len(c) for c in coc], dtype=torch.long),
                   torch.from_numpy(normalize_controls(controls, stats)), v0, future_arr,
                   np.asarray(decision, dtype=np.int64), np.asarray(drive_of, dtype=np.int64),
                   np.asarray(step_of, dtype=np.int64), stats, decisive, side_cols,
                   np.asarray(lamp_pair, dtype=bool),
                   np.asarray(scene, dtype=np.float32).reshape(-1, len(SCENE_COLUMNS)),
                   np.array([c is not None for _, _, c in windows], dtype=bool))

    def images(self, rows: torch.Tensor) -> torch.Tensor:
        """uint8 [B, V, F, H, W, 3] of the windows `rows`."""
        idx = self.frame_index[rows.cpu()].to(self.frames.device)  # idx: [B, F]
        return self.frames[idx].permute(0, 2, 1, 3, 4, 5)

    def pixels(self, rows: torch.Tensor, device: torch.device | str
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(pixel_patches, grid_thw) of the windows' images in prompt (view-major) order."""
        p = self.cfg.prompt
        every = [(v, f) for v in range(len(p.camera_names)) for f in range(p.num_frames)]
        return self.frame_pixels(rows, every, device)

    def frame_pixels(self, rows: torch.Tensor, frames: Sequence[tuple[int, int]],
                     device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """(pixel_patches, grid_thw) of the (view, frame) images `frames` of every window,
        window-major, each window's images in `frames` order."""
        views = torch.tensor([v for v, _ in frames])
        slots = torch.tensor([f for _, f in frames])
        num_views = self.frames.shape[1]
        flat = self.frame_index[rows.cpu()][:, slots] * num_views + views  # flat: [B, n]
        stored = self.frames.flatten(0, 1)  # stored: [S_total * V, H, W, 3]
        images = stored[to_device(flat, stored.device)].to(device)  # images: [B, n, H, W, 3]
        b, n, h, w, _ = images.shape
        size = (self.cfg.prompt.image_height, self.cfg.prompt.image_width)
        if (h, w) != size:
            raise ValueError(f"frames are {h}x{w}, the model takes {size[0]}x{size[1]}")
        pixels = images.reshape(b * n, h, w, 3).permute(0, 3, 1, 2).float()
        patches, grid = patchify(normalize(pixels), self.cfg.vision)
        return patches, grid.cpu()

    def token_rows(self, rows: torch.Tensor, with_coc: bool = True,
                   history_kept: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input_ids [B, T], labels [B, T], seq_lens [B]) on the CPU. history_kept: [B] bool;
        a row where it is False keeps the history placeholder ids instead of its ego history
        (past-motion dropout)."""
        rows = rows.cpu()
        b, n = rows.shape[0], self.prompt_len
        prompt = self.prompt_ids.expand(b, n).clone()
        hist = self.builder.layout.history
        prompt[:, hist.start:hist.stop] = self.history_ids[rows]
        if history_kept is not None:
            dropped = ~history_kept.cpu()  # dropped: [B]
            prompt[dropped, hist.start:hist.stop] = self.prompt_ids[hist.start:hist.stop]
        if not with_coc:
            return prompt, torch.full_like(prompt, IGNORE), torch.full((b,), n)
        lens = self.coc_lens[rows]
        width = int(lens.max())
        coc = self.coc_ids[rows, :width]
        ids = torch.cat([prompt, coc], dim=1)
        labels = torch.full_like(ids, IGNORE)
        labels[:, n - 1:n - 1 + width] = coc
        valid = torch.arange(width)[None, :] < lens[:, None]
        contrast = torch.from_numpy(self.contrast[rows.numpy()])[:, None]  # contrast: [B, 1]
        labels[:, n - 1:n - 1 + width] = labels[:, n - 1:n - 1 + width].masked_fill(
            ~valid | contrast, IGNORE)
        return ids, labels, n + lens

    def positions_for(self, length: int, grid_thw: torch.Tensor, batch: int) -> torch.Tensor:
        """[3, B, length]: every window shares the prompt layout, so one row serves all."""
        if length not in self._positions:
            ids = torch.full((1, length), self.pad_id, dtype=torch.long)
            ids[0, :self.prompt_len] = self.prompt_ids
            per_window = self.cfg.prompt.num_frames * len(self.cfg.prompt.camera_names)
            self._positions[length] = prompt_positions(
                ids, grid_thw[:per_window].cpu(), self.image_token_id,
                self.cfg.vision.spatial_merge_size)
        return self._positions[length].expand(3, batch, length)

    def decisive_mask(self, rows: torch.Tensor, width: int, offset: int = 0) -> torch.Tensor:
        """[B, width] bool: True at columns offset .. offset + decisive_lens[row] - 1."""
        cols = torch.arange(width)[None, :] - offset
        return (cols >= 0) & (cols < self.decisive_lens[rows.cpu()][:, None])

    def side_mask(self, rows: torch.Tensor, width: int, offset: int = 0) -> torch.Tensor:
        """[B, width] bool: True at columns offset + c for the side-word columns c of the
        rows' CoCs."""
        cols = self.side_cols[rows.cpu()][:, :max(width - offset, 0)]  # cols: [B, <= width]
        out = torch.zeros((cols.shape[0], width), dtype=torch.bool)
        out[:, offset:offset + cols.shape[1]] = cols
        return out

    def batch(self, rows: torch.Tensor, device: torch.device | str,
              with_coc: bool = True, history_kept: torch.Tensor | None = None) -> TrainBatch:
        ids, labels, seq_lens = self.token_rows(rows, with_coc, history_kept)
        patches, grid = self.pixels(rows, device)
        positions = self.positions_for(ids.shape[1], grid, ids.shape[0])
        none = torch.zeros(ids.shape, dtype=torch.bool)
        decisive = (self.decisive_mask(rows, ids.shape[1], self.prompt_len - 1) if with_coc
                    else none)
        sided = self.side_mask(rows, ids.shape[1], self.prompt_len - 1) if with_coc else none
        return TrainBatch(to_device(ids, device), to_device(labels, device),
                          to_device(positions, device), patches, grid,
                          to_device(seq_lens, device),
                          to_device(self.actions[rows.cpu()], device), rows,
                          to_device(decisive, device), to_device(sided, device),
                          to_device(self.scene[rows.cpu()], device),
                          coc_start=self.prompt_len - 1 if with_coc else None,
                          seq_bounds=(int(seq_lens.min()), int(seq_lens.max())))


def to_device(t: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """Host tensor -> device; to a GPU through pinned memory without waiting for the stream."""
    device = torch.device(device)
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    return t.contiguous().pin_memory().to(device, non_blocking=True)
