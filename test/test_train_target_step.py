import contextlib
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.flow import interpolate
from flashdrive_ros.model.preprocess import normalize, patchify
from flashdrive_ros.train.batched_expert import batched_velocity
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.decision_focus import DecisionFocus
from flashdrive_ros.train.flow_matching_loss import flow_matching_loss, flow_matching_loss_at
from flashdrive_ros.train.generate import generate_drive
from flashdrive_ros.train.grad_cache import GradKVCache
from flashdrive_ros.train.run_data import train_tokenizer
from flashdrive_ros.train.target_losses import coc_loss, decision_hits, merged_grid, run_backbone
from flashdrive_ros.train.target_train import target_step


@pytest.fixture(scope="module")
def data():
    drive = generate_drive(3, 2.0, (48, 64))
    tokenizer = train_tokenizer(drive.coc * 4, 120, 1000)
    cfg = tiny(tokenizer.vocab_size)
    cfg.action = dataclasses.replace(cfg.action, num_traj_tokens=1000)
    return TrainSet.build(cfg, tokenizer, [drive])


@pytest.fixture(scope="module")
def model(data):
    torch.manual_seed(0)
    return AlpamayoModel(data.cfg).double()


def _rows(data):
    return torch.tensor([0, 3, 1, len(data) - 1])


def test_batch_pixels_equal_the_per_view_assembly(data):
    rows = _rows(data)
    batch = data.batch(rows, "cpu")
    stored = data.images(rows)  # [B, V, F, H, W, 3]
    b, v, f = stored.shape[:3]
    images = stored.reshape(b * v * f, *stored.shape[3:]).permute(0, 3, 1, 2).float()
    patches, grid = patchify(normalize(images), data.cfg.vision)
    assert torch.equal(batch.pixel_patches, patches) and torch.equal(batch.grid_thw, grid)
    assert batch.seq_bounds == (int(batch.seq_lens.min()), int(batch.seq_lens.max()))


def test_images_of_one_size_encode_the_same_as_one_grid_row(data, model):
    batch = data.batch(_rows(data), "cpu")
    grid = batch.grid_thw
    merged = merged_grid(grid)
    assert merged.tolist() == [[grid.shape[0], *grid[0, 1:].tolist()]]
    mixed = torch.tensor([[1, 4, 6], [2, 4, 6], [1, 2, 2], [1, 4, 6]])
    assert merged_grid(mixed).tolist() == [[3, 4, 6], [1, 2, 2], [1, 4, 6]]
    visual = model.vlm.model.visual
    with torch.no_grad():
        each, each_deep = visual(batch.pixel_patches.double(), grid)
        once, once_deep = visual(batch.pixel_patches.double(), merged)
    assert torch.equal(once, each)
    assert all(torch.equal(a, b) for a, b in zip(once_deep, each_deep))


def test_coc_loss_from_the_first_label_column_equals_the_masked_loss(data, model):
    batch = data.batch(_rows(data), "cpu")
    out, _ = run_backbone(model, batch, data.image_token_id, torch.float64)
    focus = DecisionFocus(token_weight=5.0)
    for weights in (None, focus.loss_weights(batch.decisive, batch.sided)):
        grads, values = [], []
        for start in (None, batch.coc_start):
            hidden = out.hidden.detach().requires_grad_(True)
            ce, acc = coc_loss(model, hidden, batch.labels, weights, start)
            ce.backward()
            grads.append(hidden.grad)
            values.append((ce.detach(), acc))
        # float32 logits (coc_loss casts them), summed in another order
        torch.testing.assert_close(values[1][0], values[0][0], rtol=1e-6, atol=0.0)
        assert float(values[1][1]) == pytest.approx(float(values[0][1]), abs=1e-6)
        torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-8)
    with torch.no_grad():
        assert torch.equal(
            decision_hits(model, out.hidden, batch.labels, batch.decisive),
            decision_hits(model, out.hidden, batch.labels, batch.decisive, batch.coc_start))


def _one_draw_loss(model, cache, actions, prefix_lens, generator):
    """The flow loss as it was before draws: one [B, N, 2] noise, one [B] time per row."""
    x0 = torch.randn(actions.shape, generator=generator, dtype=actions.dtype)
    t = torch.rand(actions.shape[0], generator=generator, dtype=actions.dtype)
    x_t, target = interpolate(actions, x0, t)
    v = batched_velocity(model.expert, model.action_in_proj, model.action_out_proj, x_t, t,
                         cache, prefix_lens)
    return F.mse_loss(v.float(), target.float())


@torch.no_grad()
def test_one_flow_draw_gives_the_old_loss_and_k_draws_average_k_draws(data, model):
    batch = data.batch(_rows(data), "cpu")
    _, cache = run_backbone(model, batch, data.image_token_id, torch.float64, grad=False)
    actions = batch.actions.double()
    old = _one_draw_loss(model, cache, actions, batch.seq_lens,
                         torch.Generator().manual_seed(4))
    new = flow_matching_loss(model, cache, actions, batch.seq_lens,
                             torch.Generator().manual_seed(4), 1, batch.seq_bounds)
    assert torch.equal(new, old)

    k = 3
    gen = torch.Generator().manual_seed(9)
    x0 = torch.randn((k, *actions.shape), generator=gen, dtype=actions.dtype)
    t = torch.rand((k, actions.shape[0]), generator=gen, dtype=actions.dtype)
    many = flow_matching_loss(model, cache, actions, batch.seq_lens,
                              torch.Generator().manual_seed(9), k)
    each = [flow_matching_loss_at(model, cache, actions, batch.seq_lens, x0[i:i + 1],
                                  t[i:i + 1]) for i in range(k)]
    torch.testing.assert_close(many, torch.stack(each).mean(), rtol=1e-6, atol=0.0)
    assert len({round(float(e), 6) for e in each}) == k
    assert not torch.equal(x0[0], x0[1]) and not torch.equal(t[0], t[1])


def _old_backbone(model, batch, image_token_id):
    """The teacher-forced pass as it was: one vision grid row per image."""
    vlm, cfg = model.vlm, model.cfg.text
    embeds, visual_mask, deepstack = vlm.embed(batch.input_ids, batch.pixel_patches,
                                               batch.grid_thw, image_token_id)
    b, t = batch.input_ids.shape
    cache = GradKVCache(cfg.num_hidden_layers, b, cfg.num_key_value_heads, t, cfg.head_dim)
    out = vlm.language_model(embeds, batch.positions, cache, torch.arange(t),
                             visual_mask=visual_mask, deepstack=deepstack)
    return out, cache


def test_target_step_equals_the_step_before_its_rewrite(data):
    """Old step: one grid row per image, masked CoC loss, one flow draw, foreach AdamW; new:
    merged grid, column slice, K = 1 through the draw path, fused AdamW."""
    rows = _rows(data)
    params = {}
    for variant in ("old", "new"):
        torch.manual_seed(0)
        model = AlpamayoModel(data.cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05,
                                betas=(0.9, 0.95), fused=variant == "new")
        gen = torch.Generator().manual_seed(1)
        for _ in range(2):
            if variant == "new":
                target_step(model, opt, data, rows, torch.device("cpu"),
                            contextlib.nullcontext, torch.float32, gen, 1.0,
                            DecisionFocus(token_weight=5.0), 1)
                continue
            batch = data.batch(rows, "cpu")
            out, cache = _old_backbone(model, batch, data.image_token_id)
            weights = DecisionFocus(token_weight=5.0).loss_weights(batch.decisive, batch.sided)
            ce, _ = coc_loss(model, out.hidden, batch.labels, weights)
            loss = ce + _one_draw_loss(model, cache, batch.actions, batch.seq_lens, gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)
            opt.step()
        params[variant] = model.state_dict()
    for name, value in params["old"].items():
        torch.testing.assert_close(params["new"][name], value, rtol=1e-4, atol=1e-5,
                                   msg=name)
