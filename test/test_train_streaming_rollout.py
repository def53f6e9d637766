import dataclasses

import pytest
import torch

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.train.batched_expert import batched_velocity
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.generate import generate_drive
from flashdrive_ros.train.run_data import train_tokenizer
from flashdrive_ros.train.streaming_backbone import (
    BackboneStreamingConfig,
    SequenceSampler,
    window_losses,
)
from flashdrive_ros.train.streaming_rollout import StreamingRollout
from flashdrive_ros.train.streaming_tune import window_of

LENGTH = 6


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup():
    drive = generate_drive(7, 2.6, (48, 64))
    tokenizer = train_tokenizer(drive.coc, 120, 1000)
    cfg = tiny(tokenizer.vocab_size)
    cfg.action = dataclasses.replace(cfg.action, num_traj_tokens=1000)
    data = TrainSet.build(cfg, tokenizer, [drive])
    torch.manual_seed(0)
    model = AlpamayoModel(cfg).eval()
    return model, tokenizer, data


def engine_stream(model, tokenizer, data, rows):
    """The engine's inference path: streaming prefill of every window, then the last
    window's ground-truth CoC written as decoding writes it."""
    engine = Engine(model, tokenizer, None,
                    EngineConfig(speculative=False, cuda_graphs=False))
    with torch.no_grad():
        for row in rows:
            window = window_of(data, row)
            prompt = engine.prompt_builder.build(
                engine.history_tokenizer.encode(window.ego_history[:, :3]).tolist())
            plan = engine.stream.plan(engine.frame_layout, prompt.token_ids,
                                      window.image_stamps)
            embeds, deepstack = engine.encode(window, plan)
            out = engine.prefill(prompt.token_ids, plan, embeds, deepstack)
        coc = data.coc_ids[rows[-1], :int(data.coc_lens[rows[-1]])].tolist()
        step = engine.target.run_tokens(coc, engine.stream.cache, out.next_position)
    return engine, plan, out, step


@pytest.mark.parametrize("length", [1, LENGTH])
def test_last_window_with_gradients_equals_the_engine_streaming_path(setup, length):
    model, tokenizer, data = setup
    ends = torch.tensor([LENGTH - 1, len(data) - 1])
    rollout = StreamingRollout(model, data, torch.float32, torch.device("cpu"))
    state = rollout.roll(ends, length)
    assert all(not k.requires_grad for k in state.cache.layer_k)
    window = rollout.last_window(state, ends)
    assert window.plan.full == (length == 1)
    assert window.coc_hidden.requires_grad
    x_t = torch.randn(2, model.cfg.action.num_waypoints, 2)
    times = torch.tensor([0.3, 0.8])
    velocity = batched_velocity(model.expert, model.action_in_proj, model.action_out_proj,
                                x_t, times, window.cache, window.prefix_lens)
    for b, end in enumerate(ends.tolist()):
        engine, plan, out, step = engine_stream(model, tokenizer, data,
                                                list(range(end - length + 1, end + 1)))
        assert plan.full == window.plan.full and plan.shift == window.plan.shift
        length_b = int(window.prefix_lens[b])
        n = rollout.layout.prompt_length
        cache = engine.stream.cache
        assert cache.length == length_b
        close = dict(rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(model.vlm.lm_head(window.prompt_last[b]), out.logits,
                                   **close)
        coc_len = length_b - n
        torch.testing.assert_close(model.vlm.lm_head(window.coc_hidden[b, :coc_len]),
                                   step.logits, **close)
        torch.testing.assert_close(window.cache.positions[:, b, :length_b],
                                   cache.positions[:, 0, :length_b], rtol=0, atol=0)
        for layer in range(cache.num_layers):
            torch.testing.assert_close(window.cache.layer_k[layer][b, :, :length_b],
                                       cache.k[layer, 0, :, :length_b], **close)
            torch.testing.assert_close(window.cache.layer_v[layer][b, :, :length_b],
                                       cache.v[layer, 0, :, :length_b], **close)
        with torch.no_grad():
            expected = model.velocity(x_t[b:b + 1], times[b:b + 1], cache, length_b)
        torch.testing.assert_close(velocity[b:b + 1], expected, **close)


def test_streaming_loss_reaches_the_vision_encoder_and_the_backbone(setup):
    model, _, data = setup
    rollout = StreamingRollout(model, data, torch.float32, torch.device("cpu"))
    ends = torch.tensor([LENGTH, len(data) - 2])
    window = rollout.stream(ends, 3)
    losses = window_losses(model, window, data.actions[ends], torch.Generator().manual_seed(0))
    assert 0.0 <= float(losses["coc_acc"]) <= 1.0
    model.zero_grad(set_to_none=True)
    (losses["coc_loss"] + losses["flow_loss"]).backward()
    grads = {"vision": model.vlm.visual.blocks[0].attn.qkv.weight.grad,
             "backbone": model.vlm.language_model.layers[0].self_attn.k_proj.weight.grad,
             "expert": model.expert.layers[0].self_attn.q_proj.weight.grad}
    for name, grad in grads.items():
        assert grad is not None and float(grad.abs().sum()) > 0, name
    model.zero_grad(set_to_none=True)


def test_sequence_sampler_draws_runs_of_one_drive(setup):
    _, _, data = setup
    sampler = SequenceSampler(data, range(2, 100))
    assert sampler.lengths == list(range(2, len(data) + 1))
    gen = torch.Generator().manual_seed(0)
    ends = sampler.draw(16, 4, gen)
    assert bool(((ends >= 3) & (ends < len(data))).all())
    with pytest.raises(ValueError, match="consecutive windows"):
        SequenceSampler(data, range(len(data) + 1, len(data) + 3))


def test_backbone_streaming_config_is_validated():
    assert BackboneStreamingConfig(streaming_sequences=8, full_prefill_windows=8
                                   ).full_prefill_share == 0.5
    with pytest.raises(ValueError, match="min_windows"):
        BackboneStreamingConfig(min_windows=1)
    with pytest.raises(ValueError, match="not both 0"):
        BackboneStreamingConfig(streaming_sequences=0, full_prefill_windows=0)
