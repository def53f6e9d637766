"""The reference path as the released code runs it: HF `generate()` for the CoC (encode and
prefill inside it), then plain Euler over the generated cache with our action expert.

Stages from CUDA events on one timeline: encode = image preprocessing (ours, as the engine's)
through the end of HF's vision tower (a forward hook); prefill = from there to the first
logits processor call (the prompt forward); decode = the remaining generate() forwards;
action = REFERENCE_FLOW_STEPS (10) plain Euler steps of our expert over a KV cache holding HF's
keys and values (copied untimed; our expert re-applies RoPE to the prefix keys, the release
reads HF's rotated keys), integrated to trajectories. total = the sum of the four.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from flashdrive_ros.bench.hf_model import cache_layers
from flashdrive_ros.bench.marks import Marks
from flashdrive_ros.bench.shapes import Parts
from flashdrive_ros.bench.stats import stage_summary
from flashdrive_ros.bench.windows import SlidingWindows
from flashdrive_ros.bench.work import Work, full_prefill_keys
from flashdrive_ros.engine.flow_cached import FlowSchedule, euler_cached
from flashdrive_ros.engine.types import Window
from flashdrive_ros.model.flow import initial_noise
from flashdrive_ros.model.history import HistoryTokenizer
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import prompt_positions, text_positions
from flashdrive_ros.model.preprocess import preprocess_images
from flashdrive_ros.model.prompt import PromptBuilder
from flashdrive_ros.model.unicycle import fit_v0

REFERENCE_FLOW_STEPS = 10
STOP_TOKENS = 3


def reference_new_tokens(coc_tokens: int) -> int:
    """CoC, <|cot_end|>, <|traj_future_start|> and one token after it (the release stops one
    token after <|traj_future_start|> so that its keys and values exist)."""
    return coc_tokens + STOP_TOKENS


class OnLogits:
    """A logits processor that calls `callback` on every call and leaves the scores alone."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.callback()
        return scores


class ReferenceRunner:
    def __init__(self, parts: Parts, hf_model: torch.nn.Module, device: str,
                 dtype: torch.dtype, coc_tokens: int, seed: int = 0) -> None:
        from transformers import GenerationConfig, LogitsProcessorList

        self.parts, self.hf, self.device, self.dtype = parts, hf_model, device, dtype
        cfg, tok = parts.cfg, parts.tokenizer
        self.builder = PromptBuilder(cfg, tok)
        self.history = HistoryTokenizer(cfg.action, tok.traj_token_start)
        self.image_token_id = tok.token_id("<|image_pad|>")
        self.size = (cfg.prompt.image_height, cfg.prompt.image_width)
        self.new_tokens = reference_new_tokens(coc_tokens)
        self.generation = GenerationConfig(max_new_tokens=self.new_tokens,
                                           min_new_tokens=self.new_tokens, do_sample=False,
                                           return_dict_in_generate=True,
                                           eos_token_id=None, pad_token_id=0)
        self.processors = LogitsProcessorList([OnLogits(lambda: self._mark_once("prefill_end"))])
        self.seed = seed
        self.marks = Marks(device)
        visual = hf_model.model.visual
        visual.register_forward_hook(lambda *_: self._mark_once("encode_end"))
        self.takes_mm_types = "mm_token_type_ids" in inspect.signature(
            hf_model.forward).parameters

    def _mark_once(self, name: str) -> None:
        if not self.marks.has(name):
            self.marks.mark(name)

    @torch.no_grad()
    def step(self, window: Window, samples: list[int]) -> tuple[dict[int, dict], int]:
        """{samples: {stage: ms}} for each sample count (generate once, action per count),
        and the prompt length."""
        ids = self.builder.build(self.history.encode(window.ego_history[:, :3]).tolist())
        input_ids = torch.tensor([ids.token_ids], device=self.device)
        self.marks = Marks(self.device)
        self.marks.mark("start")
        images = window.images.reshape(-1, *window.images.shape[2:])  # [V*F, H, W, 3]
        patches, grid = preprocess_images(images, self.parts.cfg.vision, self.size)
        kwargs = {"pixel_values": patches.to(self.device, self.dtype),
                  "image_grid_thw": grid.to(self.device),
                  "attention_mask": torch.ones_like(input_ids)}
        if self.takes_mm_types:
            kwargs["mm_token_type_ids"] = (input_ids == self.image_token_id).int()
        out = self.hf.generate(input_ids, generation_config=self.generation,
                               logits_processor=self.processors,
                               **kwargs)
        self.marks.mark("decode_end")
        generated = out.sequences.shape[1] - input_ids.shape[1]
        if generated != self.new_tokens:
            raise RuntimeError(f"generate() made {generated} tokens, expected "
                               f"{self.new_tokens}")
        cache = self._our_cache(out.past_key_values, input_ids, grid)
        head = {"encode": self.marks.ms("start", "encode_end"),
                "prefill": self.marks.ms("encode_end", "prefill_end"),
                "decode": self.marks.ms("prefill_end", "decode_end")}
        result = {}
        for count in samples:
            action = self._action_ms(cache, window, count)
            stages = {**head, "action": action}
            result[count] = {**stages, "total": sum(stages.values())}
        return result, input_ids.shape[1]

    def _our_cache(self, past, input_ids: torch.Tensor, grid: torch.Tensor) -> KVCache:
        layers = cache_layers(past)
        t = self.parts.cfg.text
        slots = layers[0][0].shape[2]
        cache = KVCache(t.num_hidden_layers, 1, t.num_key_value_heads, slots, t.head_dim,
                        self.dtype, self.device)
        for i, (k, v) in enumerate(layers):  # k, v: [1, Hkv, S, D]
            cache.k[i].copy_(k)
            cache.v[i].copy_(v)
        prompt = prompt_positions(input_ids.cpu(), grid, self.image_token_id,
                                  self.parts.cfg.vision.spatial_merge_size)  # [3, 1, P]
        start = int(prompt.max()) + 1
        generated = text_positions(start, slots - prompt.shape[2])
        positions = torch.cat([prompt, generated], dim=2).to(self.device)
        cache.write_positions(torch.arange(slots, device=self.device), positions)
        cache.advance_to(slots)
        return cache

    def _action_ms(self, cache: KVCache, window: Window, samples: int) -> float:
        model, a = self.parts.model, self.parts.cfg.action
        generator = torch.Generator(device=self.device).manual_seed(self.seed)
        marks = Marks(self.device)
        marks.mark("start")
        velocity_fn = model.velocity_fn(cache, cache.length)
        x0 = initial_noise(samples, (a.num_waypoints, a.action_dim), generator, torch.float32)
        actions = euler_cached(velocity_fn, x0, FlowSchedule.plain(REFERENCE_FLOW_STEPS))
        history = torch.as_tensor(window.ego_history, dtype=torch.float64)
        v0 = fit_v0(history[:, :3], history[:, 3], a.history_dt)
        model.trajectories(actions, v0.to(actions.device)).cpu()
        marks.mark("end")
        return marks.ms("start", "end")


def run_reference(runner: ReferenceRunner, samples: list[int], warmup: int, windows: int,
                  seed: int) -> tuple[dict[int, dict], dict[int, Work]]:
    """Per sample count: the stage summary over `windows` timed windows, and the work."""
    drive = SlidingWindows(runner.parts.cfg, seed)
    for window in drive.take(warmup):
        runner.step(window, samples)
    timings: dict[int, list[dict]] = {count: [] for count in samples}
    prompt_length = 0
    for window in drive.take(windows):
        per_count, prompt_length = runner.step(window, samples)
        for count, stages in per_count.items():
            timings[count].append(stages)
    layout = runner.builder.layout
    images = sum(len(row) for row in layout.images)
    results, works = {}, {}
    for count in samples:
        results[count] = {"stages": stage_summary(timings[count]), "windows": windows,
                          "generate_new_tokens": runner.new_tokens,
                          "flow_steps": REFERENCE_FLOW_STEPS}
        works[count] = Work(images=images, prompt_length=prompt_length,
                            prefill_tokens=prompt_length,
                            prefill_keys=full_prefill_keys(prompt_length),
                            decode="hf_generate", coc_tokens=runner.new_tokens - STOP_TOKENS,
                            rounds=0.0, hf_new_tokens=runner.new_tokens,
                            velocity_calls=REFERENCE_FLOW_STEPS, samples=count)
    return results, works
