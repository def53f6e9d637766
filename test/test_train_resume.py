import contextlib
import dataclasses
import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.train.checkpoint import RESUME_SUBDIR, STATE_JSON
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.decision_focus import DecisionFocus
from flashdrive_ros.train.drive_cache import load_drives, save_drives
from flashdrive_ros.train.generate import generate_drive
from flashdrive_ros.train.log import TrainLog, read_log
from flashdrive_ros.train.pipeline import main
from flashdrive_ros.train.pipeline_args import parse_args
from flashdrive_ros.train.run_data import train_tokenizer
from flashdrive_ros.train.recipe import Recipe, recipe_from_dict, smoke
from flashdrive_ros.train.sensor_noise import SensorNoise
from flashdrive_ros.train.scene_readout import readout_losses
from flashdrive_ros.train.batched_expert import batched_velocity
from flashdrive_ros.train.target_losses import image_slots, run_backbone, target_step_losses
from flashdrive_ros.train.target_train import TargetTrainer, evaluate_target, target_step


@pytest.fixture(scope="module")
def drive():
    return generate_drive(5, 2.2, (48, 64), SensorNoise())


@pytest.fixture(scope="module")
def data(drive):
    tokenizer = train_tokenizer(drive.coc * 4, 120, 1000)
    cfg = tiny(tokenizer.vocab_size)
    cfg.action = dataclasses.replace(cfg.action, num_traj_tokens=1000)
    return TrainSet.build(cfg, tokenizer, [drive])


def _trainer(data, tmp_path, name, history_dropout=0.0, scene_weight=0.0, readout_blind=0.0,
             expert_blind=0.0):
    torch.manual_seed(0)
    model = AlpamayoModel(data.cfg)
    log = TrainLog(tmp_path / f"{name}.jsonl", echo=False)
    return TargetTrainer(model, data, 6, None, 3, 3e-3, 7, log, torch.device("cpu"),
                         contextlib.nullcontext, torch.float32, log_every=1,
                         focus=DecisionFocus(token_weight=3.0, balance=0.5), flow_draws=2,
                         history_dropout=history_dropout, scene_weight=scene_weight,
                         readout_blind=readout_blind, expert_blind=expert_blind)


def _assert_resumes_alike(data, tmp_path, whole, **options):
    """A run of `options` stopped after 2 steps and resumed in a new trainer (state through
    tensors and JSON) ends where `whole`, the run that never stopped, ended."""
    first = _trainer(data, tmp_path, "first", **options)
    assert not first.run(max_steps=2)
    tensors, meta = first.state()
    second = _trainer(data, tmp_path, "second", **options)
    second.model.load_state_dict(first.model.state_dict())
    second.load_state({k: v.clone() for k, v in tensors.items()}, json.loads(json.dumps(meta)))
    assert second.run()
    assert second.last == pytest.approx(whole.last, rel=1e-5, nan_ok=True)


def test_a_stopped_and_resumed_target_stage_takes_the_same_steps(data, tmp_path):
    whole = _trainer(data, tmp_path, "whole")
    assert whole.run()
    first = _trainer(data, tmp_path, "first")
    assert not first.run(max_steps=3)
    tensors, meta = first.state()
    meta = json.loads(json.dumps(meta))
    # A new process: fresh model and trainer, state from the tensors and JSON only.
    second = _trainer(data, tmp_path, "second")
    second.model.load_state_dict(first.model.state_dict())
    second.load_state({k: v.clone() for k, v in tensors.items()}, meta)
    assert second.run() and second.progress.step == whole.progress.step == 6
    for (name, a), b in zip(whole.model.state_dict().items(),
                            second.model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert second.last == pytest.approx(whole.last, rel=1e-5)
    assert not torch.equal(whole.model.state_dict()["action_out_proj.weight"],
                           _trainer(data, tmp_path, "fresh").model.state_dict()[
                               "action_out_proj.weight"])


def test_history_dropout_drops_its_share_of_windows_and_resumes_alike(data, tmp_path):
    trainer = _trainer(data, tmp_path, "share", history_dropout=0.4)
    assert _trainer(data, tmp_path, "none").draw_masks() == (None, None)
    assert trainer.draw_masks()[1] is None
    dropped = torch.cat([~trainer.draw_masks()[0] for _ in range(2000)])
    assert abs(float(dropped.float().mean()) - 0.4) < 0.03
    whole = _trainer(data, tmp_path, "whole", history_dropout=0.5)
    plain = _trainer(data, tmp_path, "plain")
    assert whole.run() and plain.run()
    assert whole.last != pytest.approx(plain.last, rel=1e-5)
    _assert_resumes_alike(data, tmp_path, whole, history_dropout=0.5)
    with pytest.raises(ValueError, match="history_dropout"):
        _trainer(data, tmp_path, "bad", history_dropout=1.0)


def test_the_readout_loss_reaches_the_vision_encoder_and_joins_the_step(data, tmp_path):
    off = _trainer(data, tmp_path, "off")
    assert off.readout is None and "readout.proj.weight" not in off.state()[0]
    on = _trainer(data, tmp_path, "on", scene_weight=2.0)
    in_opt = {id(p) for group in on.opt.param_groups for p in group["params"]}
    assert all(id(p) in in_opt for p in on.readout.parameters())
    rows = torch.arange(3)
    batch = data.batch(rows, "cpu")
    out, _ = run_backbone(on.model, batch, data.image_token_id, torch.float32)
    loss = readout_losses(on.readout, out.hidden[:, batch.coc_start], batch.scene)
    loss["readout_loss"].backward()
    vision_grad = [p.grad for p in on.model.vlm.visual.parameters() if p.grad is not None]
    assert vision_grad and any(float(g.abs().sum()) > 0 for g in vision_grad)
    on.opt.zero_grad(set_to_none=True)
    gen = torch.Generator().manual_seed(1)
    losses, _, _ = target_step(on.model, on.opt, data, rows, torch.device("cpu"),
                               contextlib.nullcontext, torch.float32, gen, 1.0, on.focus, 1,
                               readout=on.readout, scene_weight=2.0)
    assert {"readout_loss", "lamp_acc", "gap_acc", "motion_acc"} <= set(losses)
    assert not any(name.startswith("readout") for name in on.model.state_dict())
    metrics = evaluate_target(on.model, data, rows, torch.device("cpu"),
                              contextlib.nullcontext, torch.float32, 3, readout=on.readout)
    assert 0.0 <= metrics["gap_acc"] <= 1.0 and "readout_loss" in metrics
    assert "gap_acc" not in evaluate_target(on.model, data, rows, torch.device("cpu"),
                                            contextlib.nullcontext, torch.float32, 3)


def test_a_run_with_the_readout_differs_from_one_without_and_resumes_alike(data, tmp_path):
    whole = _trainer(data, tmp_path, "whole", scene_weight=1.0)
    plain = _trainer(data, tmp_path, "plain")
    assert whole.run() and plain.run()
    assert not torch.equal(whole.model.state_dict()["action_out_proj.weight"],
                           plain.model.state_dict()["action_out_proj.weight"])
    first = _trainer(data, tmp_path, "first", scene_weight=1.0)
    assert not first.run(max_steps=3)
    tensors, meta = first.state()
    assert {"readout.proj.weight", "readout.proj.bias"} <= set(tensors)
    second = _trainer(data, tmp_path, "second", scene_weight=1.0)
    second.model.load_state_dict(first.model.state_dict())
    second.load_state({k: v.clone() for k, v in tensors.items()}, json.loads(json.dumps(meta)))
    torch.testing.assert_close(second.readout.proj.weight, first.readout.proj.weight)
    assert second.run()
    torch.testing.assert_close(second.readout.proj.weight, whole.readout.proj.weight,
                               rtol=1e-5, atol=1e-6)
    assert second.last == pytest.approx(whole.last, rel=1e-5, nan_ok=True)
    assert whole.finish(data, 3, 7)["scene_weight"] == 1.0
    with pytest.raises(ValueError, match="scene_weight"):
        _trainer(data, tmp_path, "bad", scene_weight=-1.0)


def test_blind_windows_lose_their_history_and_train_the_readout_alone(data, tmp_path):
    trainer = _trainer(data, tmp_path, "share", history_dropout=0.2, scene_weight=1.0,
                       readout_blind=0.3)
    masks = [trainer.draw_masks() for _ in range(2000)]
    kept = torch.cat([k for k, _ in masks])
    trained = torch.cat([t for _, t in masks])
    assert abs(float((~kept).float().mean()) - 0.5) < 0.03
    assert abs(float((~trained).float().mean()) - 0.3) < 0.03
    assert not bool((~trained & kept).any())
    rows = torch.arange(3)
    trained = torch.tensor([True, False, True])
    batch = data.batch(rows, "cpu")
    altered = dataclasses.replace(
        batch, actions=batch.actions.clone(), labels=batch.labels.clone())
    altered.actions[1] += 1.0
    labelled = altered.labels[1] >= 0
    altered.labels[1, labelled] = (altered.labels[1, labelled] + 1) % data.cfg.text.vocab_size

    def losses(b, mask):
        with torch.no_grad():
            return target_step_losses(trainer.model, b, data.image_token_id, torch.float32,
                                      torch.Generator().manual_seed(3), grad=True,
                                      focus=trainer.focus, flow_draws=2,
                                      readout=trainer.readout, trained=mask)

    a, b = losses(batch, trained), losses(altered, trained)
    for name in ("coc_loss", "flow_loss", "readout_loss"):
        torch.testing.assert_close(a[name], b[name], msg=name)
    a, b = losses(batch, None), losses(altered, None)
    assert float(a["coc_loss"]) != float(b["coc_loss"])
    assert float(a["flow_loss"]) != float(b["flow_loss"])
    whole = _trainer(data, tmp_path, "whole", scene_weight=1.0, readout_blind=0.5)
    readout = _trainer(data, tmp_path, "readout", scene_weight=1.0)
    assert whole.run() and readout.run()
    assert not torch.equal(whole.model.state_dict()["action_out_proj.weight"],
                           readout.model.state_dict()["action_out_proj.weight"])
    _assert_resumes_alike(data, tmp_path, whole, scene_weight=1.0, readout_blind=0.5)
    assert whole.finish(data, 3, 7)["readout_blind"] == 0.5
    for dropout, weight, blind in ((0.0, 0.0, 0.3), (0.6, 1.0, 0.4), (0.0, 1.0, 1.0)):
        with pytest.raises(ValueError, match="readout_blind"):
            _trainer(data, tmp_path, "bad", dropout, weight, blind)


def test_a_blind_expert_reads_no_image_slot_and_resumes_alike(data, tmp_path):
    trainer = _trainer(data, tmp_path, "share", expert_blind=0.4)
    draws = torch.cat([trainer.draw_expert_blind() for _ in range(2000)])
    assert abs(float(draws.float().mean()) - 0.4) < 0.03
    plain = _trainer(data, tmp_path, "plain")
    state = plain.pick_gen.get_state()
    assert plain.draw_expert_blind() is None and torch.equal(plain.pick_gen.get_state(), state)
    rows = torch.arange(3)
    blind = torch.tensor([True, False, False])
    batch = data.batch(rows, "cpu")
    images = batch.input_ids == data.image_token_id
    assert bool(images.any()) and torch.equal(image_slots(batch, data.image_token_id, blind),
                                              images & blind[:, None])
    model = trainer.model
    with torch.no_grad():
        _, cache = run_backbone(model, batch, data.image_token_id, torch.float32, grad=False)

    def velocities(hidden):
        with torch.no_grad():
            x_t = torch.randn(batch.actions.shape, generator=torch.Generator().manual_seed(1))
            return batched_velocity(model.expert, model.action_in_proj, model.action_out_proj,
                                    x_t, torch.full((3,), 0.5), cache, batch.seq_lens,
                                    hidden_slots=hidden)

    hidden = image_slots(batch, data.image_token_id, blind)
    before = velocities(hidden)
    slots = images.any(dim=0).nonzero().flatten()
    cache.k[:, :, :, slots] = 50.0 * torch.randn_like(cache.k[:, :, :, slots])
    after = velocities(hidden)
    torch.testing.assert_close(after[0], before[0])
    assert not torch.allclose(after[1:], before[1:])
    whole = _trainer(data, tmp_path, "whole", expert_blind=0.5)
    assert whole.run() and plain.run()
    assert whole.first["coc_loss"] == pytest.approx(plain.first["coc_loss"], rel=1e-5)
    assert whole.first["flow_loss"] != pytest.approx(plain.first["flow_loss"], rel=1e-5)
    _assert_resumes_alike(data, tmp_path, whole, expert_blind=0.5)
    assert whole.finish(data, 3, 7)["expert_blind"] == 0.5
    assert parse_args(["--out", "x", "--expert-blind", "0.3"])[1].expert_blind == 0.3
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--expert-blind", "1.5"])
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="expert_blind"):
            _trainer(data, tmp_path, "bad", expert_blind=bad)
        with pytest.raises(ValueError, match="expert_blind"):
            Recipe(expert_blind=bad)


def test_generator_state_of_another_device_is_refused(data, tmp_path):
    trainer = _trainer(data, tmp_path, "t")
    tensors, meta = trainer.state()
    meta["flow_device"] = "cuda"
    with pytest.raises(ValueError, match="trained on cuda"):
        trainer.load_state(tensors, meta)


def test_drive_cache_gives_back_the_same_drives(drive, tmp_path):
    save_drives([drive, drive], tmp_path / "drives")
    back = load_drives(tmp_path / "drives")
    assert len(back) == 2
    for field in dataclasses.fields(drive):
        a, b = getattr(drive, field.name), getattr(back[1], field.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), \
                field.name
        else:
            assert a == b, field.name
    with pytest.raises(FileNotFoundError, match="no drive cache"):
        load_drives(tmp_path / "none")


def test_recipe_goes_through_json_and_new_settings_are_validated():
    for recipe in (Recipe(), smoke(), Recipe(target_minutes=9.5, flow_draws=1)):
        assert recipe_from_dict(json.loads(json.dumps(dataclasses.asdict(recipe)))) == recipe
    with pytest.raises(ValueError, match="no fields"):
        recipe_from_dict({"bogus": 1})
    for bad in ({"flow_draws": 0}, {"target_minutes": 0.0}, {"later_minutes": -1.0},
                {"target_share": 1.0}, {"history_dropout": 1.0}, {"history_dropout": -0.1}):
        with pytest.raises(ValueError):
            Recipe(**bad)


def _weights(path):
    return load_file(str(path / RESUME_SUBDIR / "model.safetensors"))


def test_pipeline_target_in_two_calls_equals_one_call_and_resumes_to_a_model(tmp_path):
    common = ["--device", "cpu", "--workers", "2", "--minutes-budget", "30"]
    fresh = ["--smoke", "--target-minutes", "600", "--stages", "target"]
    one, half, rest, final = (tmp_path / n for n in ("one", "half", "rest", "final"))
    assert main(["--out", str(one), *fresh, *common]) == 0
    assert main(["--out", str(half), *fresh, "--target-call-steps", "4", *common]) == 0
    state = json.loads((half / RESUME_SUBDIR / STATE_JSON).read_text())
    assert state["stage"] == "target" and state["target"]["step"] == 4
    assert main(["--resume", str(half), "--out", str(rest), "--stages", "target",
                 *common]) == 0
    a, b = _weights(one), _weights(rest)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6, msg=name)
    done = json.loads((rest / RESUME_SUBDIR / STATE_JSON).read_text())
    assert done["stage"] == "later" and done["target"]["step"] == 8
    assert (json.loads((rest / "summary.json").read_text())["target"]["eval_flow_loss"]
            == pytest.approx(json.loads((one / "summary.json").read_text())
                             ["target"]["eval_flow_loss"], rel=1e-5))

    assert main(["--resume", str(rest), "--out", str(final), *common]) == 0
    summary = json.loads((final / "summary.json").read_text())
    assert [c["stages"] for c in summary["calls"]] == ["target", "target", "all"]
    assert summary["calls"][-1]["target_step_at_start"] == 8
    assert summary["target"]["steps"] == 8 and summary["streaming"]["steps"] >= 1
    AlpamayoModel.from_dir(final / "model")
    stages = {r["stage"] for r in read_log(final / "train_log.jsonl")}
    assert "resume" in stages and "target" not in stages and "drafter_flat" in stages
    assert (final / "coverage.md").read_text() == (half / "coverage.md").read_text()


def test_resume_refuses_recipe_options_and_missing_checkpoints(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--resume", str(tmp_path), "--out", str(tmp_path / "o"), "--smoke"])
    assert main(["--resume", str(tmp_path), "--out", str(tmp_path / "o"),
                 "--device", "cpu"]) == 2
    assert "no complete checkpoint" in capsys.readouterr().err
