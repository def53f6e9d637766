"""Prompt token ids and their layout for the Alpamayo 1 and Alpamayo 1.5 chat formats.

<|im_start|>system\\n{SYSTEM}<|im_end|>\\n<|im_start|>user\\n
  per camera, per frame (oldest first): [1.5 only: "{Camera name}: " before frame 0,
  "frame {i} "] <|vision_start|> <|image_pad|> x tokens_per_image <|vision_end|>
<|traj_history_start|> 48 history tokens <|traj_history_end|>{INSTRUCTION}<|im_end|>\\n
<|im_start|>assistant\\n<|cot_start|>

Text runs are encoded piece by piece at pre-token boundaries, so the ids equal the encoding
of the whole string; the spans say which ids belong to the fixed prefix, to each image block
and to the tail, which is what the streaming engine re-uses or rewrites.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.tokenizer import TextTokenizer

SYSTEM_TEXT = "You are a driving assistant that generates safe and accurate actions."
INSTRUCTION_TEXT = ("output the chain-of-thought reasoning of the driving process, "
                    "then output the future trajectory.")
CAMERA_DISPLAY_NAMES = {
    "camera_cross_left_120fov": "Front left camera",
    "camera_front_wide_120fov": "Front camera",
    "camera_cross_right_120fov": "Front right camera",
    "camera_rear_left_70fov": "Rear left camera",
    "camera_rear_tele_30fov": "Rear camera",
    "camera_rear_right_70fov": "Rear right camera",
    "camera_front_tele_30fov": "Front telephoto camera",
}


def camera_display_name(name: str, slot: int) -> str:
    return CAMERA_DISPLAY_NAMES.get(name, f"Camera {slot}")


@dataclass(frozen=True)
class ImageSpan:
    """One (camera, frame) block: label text, then vision_start, pads, vision_end."""

    camera: int
    frame: int
    text: range
    pads: range

    @property
    def block(self) -> range:
        """Label text through vision_end."""
        return range(self.text.start, self.pads.stop + 1)


@dataclass(frozen=True)
class PromptLayout:
    prefix: range
    images: list[list[ImageSpan]]
    history: range
    tail: range

    @property
    def length(self) -> int:
        return self.tail.stop


@dataclass(frozen=True)
class Prompt:
    token_ids: list[int]
    layout: PromptLayout


class PromptBuilder:
    def __init__(self, cfg: ModelConfig, tokenizer: TextTokenizer) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.num_history_tokens = 3 * cfg.action.num_history
        self._history_pad = tokenizer.token_id("traj_history")
        self._ids, self._layout = self._assemble()

    def _special(self, name: str) -> list[int]:
        return [self.tokenizer.token_id(name)]

    def _assemble(self) -> tuple[list[int], PromptLayout]:
        tok, p = self.tokenizer, self.cfg.prompt
        ids: list[int] = []
        ids += self._special("<|im_start|>") + tok.encode("system\n" + SYSTEM_TEXT)
        ids += self._special("<|im_end|>") + tok.encode("\n")
        ids += self._special("<|im_start|>") + tok.encode("user\n")
        prefix = range(0, len(ids))
        pads = [tok.token_id("<|image_pad|>")] * self.cfg.tokens_per_image
        images: list[list[ImageSpan]] = []
        for cam, name in enumerate(p.camera_names):
            row = []
            for frame in range(p.num_frames):
                label = ""
                if p.layout == "alpamayo-1.5":
                    head = f"{camera_display_name(name, cam)}: " if frame == 0 else ""
                    label = f"{head}frame {frame} "
                text_start = len(ids)
                ids += tok.encode(label) if label else []
                text = range(text_start, len(ids))
                ids += self._special("<|vision_start|>")
                pad_start = len(ids)
                ids += pads
                row.append(ImageSpan(cam, frame, text, range(pad_start, len(ids))))
                ids += self._special("<|vision_end|>")
            images.append(row)
        tail_start = len(ids)
        ids += self._special("traj_history_start")
        history = range(len(ids), len(ids) + self.num_history_tokens)
        ids += [self._history_pad] * self.num_history_tokens
        ids += self._special("traj_history_end") + tok.encode(INSTRUCTION_TEXT)
        ids += self._special("<|im_end|>") + tok.encode("\n")
        ids += self._special("<|im_start|>") + tok.encode("assistant\n")
        ids += self._special("cot_start")
        return ids, PromptLayout(prefix, images, history, range(tail_start, len(ids)))

    @property
    def layout(self) -> PromptLayout:
        return self._layout

    def text(self) -> str:
        """The prompt as one string (history as <|traj_history|> placeholders)."""
        return self.tokenizer.decode(self._ids)

    def build(self, history_ids: Sequence[int] | None = None) -> Prompt:
        """Token ids with the ego-history tokens in place (placeholders when None)."""
        ids = list(self._ids)
        if history_ids is not None:
            history_ids = [int(i) for i in history_ids]
            if len(history_ids) != self.num_history_tokens:
                raise ValueError(f"expected {self.num_history_tokens} history token ids, got "
                                 f"{len(history_ids)}")
            if not all(0 <= i < self.tokenizer.vocab_size for i in history_ids):
                raise ValueError("history token ids outside the vocabulary")
            h = self._layout.history
            ids[h.start:h.stop] = history_ids
        return Prompt(ids, self._layout)
