import dataclasses

import numpy as np
import pytest
import torch
from helpers.engines import FLOAT32_REORDER_ATOL_M, MAX_COC, engine, run
from helpers.windows import window

from flashdrive_ros.engine.config import DRAFTER_FILE, EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.timing import StageTimer
from flashdrive_ros.engine.types import STAGES, Window
from flashdrive_ros.model.config import ConfigError
from flashdrive_ros.model.weights import save_model_dir

pytestmark = pytest.mark.usefixtures("one_thread")


def test_plan_fields(parts):
    plans = run(engine(parts, num_samples=3))
    for plan, full in zip(plans, (True, False)):
        assert plan.trajectories.shape == (3, 64, 3) and plan.trajectories.dtype == np.float64
        assert np.isfinite(plan.trajectories).all()
        assert plan.full_prefill == full and plan.mode == "flashdrive"
        assert set(plan.timings_ms) == set(STAGES) and plan.timings_ms["total"] > 0
        assert 1 <= len(plan.coc_token_ids) <= MAX_COC
        # The first token comes from the prefill logits, the rest from verify rounds.
        assert sum(plan.accepted_lengths) + 1 == plan.tokens_generated
        assert plan.tokens_generated in (len(plan.coc_token_ids), len(plan.coc_token_ids) + 1)
        assert isinstance(plan.coc_text, str)
    assert plans[1].sequence == 1 and plans[1].t0 == pytest.approx(0.4)


def test_baseline_and_flashdrive_agree_on_the_first_window(parts):
    model, tok, drafter = parts
    fast = engine(parts).step(window(0))
    base = Engine(model, tok, None, EngineConfig.baseline(max_coc_tokens=MAX_COC)).step(
        window(0))
    assert fast.full_prefill and base.full_prefill
    assert fast.coc_token_ids == base.coc_token_ids
    assert fast.coc_text == base.coc_text
    assert base.accepted_lengths == [] and fast.accepted_lengths
    assert base.mode == "baseline"


def test_baseline_recomputes_every_window_and_decodes_one_token_per_forward(parts):
    model, tok, _ = parts
    base = Engine(model, tok, None, EngineConfig.baseline(max_coc_tokens=MAX_COC))
    assert base.graphs is None and base.proposer is None
    for plan in run(base, (0, 1, 2)):
        assert plan.full_prefill and plan.accepted_lengths == []
        assert plan.prefill_reason == "streaming off"
        assert plan.mode == "baseline"
    assert base.cfg.flow_schedule.num_velocity_calls == base.cfg.baseline_flow_steps == 10


def test_each_switch_changes_only_its_stage(parts):
    ref_engine, spec_off_engine = engine(parts), engine(parts, speculative=False)
    ref, no_spec = [], []
    for step in (0, 1):
        ref.append(ref_engine.step(window(step)))
        no_spec.append(spec_off_engine.step(window(step)))
        a, b = ref[-1], no_spec[-1]
        assert a.coc_token_ids == b.coc_token_ids and a.full_prefill == b.full_prefill
        assert b.accepted_lengths == []
        # The same committed KV, up to float rounding of block-wise vs one-token forwards;
        # the random tiny expert and the unicycle integration amplify that rounding.
        ca, cb = ref_engine.stream.cache, spec_off_engine.stream.cache
        assert ca.length == cb.length
        torch.testing.assert_close(ca.k[..., :ca.length, :], cb.k[..., :cb.length, :],
                                   rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(ca.v[..., :ca.length, :], cb.v[..., :cb.length, :],
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(a.trajectories, b.trajectories, rtol=0, atol=0.1)
    no_cache = run(engine(parts, cached_velocity=False))
    for a, b in zip(ref, no_cache):
        assert a.coc_token_ids == b.coc_token_ids and a.full_prefill == b.full_prefill
        assert a.accepted_lengths == b.accepted_lengths
        assert not np.allclose(a.trajectories, b.trajectories, atol=1e-6)
    no_stream = run(engine(parts, streaming=False))
    assert no_stream[0].coc_token_ids == ref[0].coc_token_ids
    np.testing.assert_array_equal(no_stream[0].trajectories, ref[0].trajectories)
    assert [p.full_prefill for p in no_stream] == [True, True]
    assert [p.full_prefill for p in ref] == [True, False]


def test_plans_are_deterministic_under_a_seed(parts):
    a = run(engine(parts, num_samples=2, seed=5))
    b = run(engine(parts, num_samples=2, seed=5))
    c = run(engine(parts, num_samples=2, seed=6))
    for x, y, z in zip(a, b, c):
        assert x.coc_token_ids == y.coc_token_ids == z.coc_token_ids
        np.testing.assert_array_equal(x.trajectories, y.trajectories)
        assert not np.allclose(x.trajectories, z.trajectories)
    sampled = [run(engine(parts, speculative=False, temperature=1.0, seed=3), steps=(0,))[0]
               for _ in range(2)]
    assert sampled[0].coc_token_ids == sampled[1].coc_token_ids


def test_speculative_decoding_samples_when_a_temperature_is_set(parts):
    """Drafts are accepted by the speculative-sampling rule (its distribution is tested in
    test_engine_speculative.py); the draws are seeded per window."""
    greedy = engine(parts).step(window(0))
    sampled = [engine(parts, temperature=1.0, top_p=0.95, seed=seed).step(window(0))
               for seed in (1, 1, 2, 3, 4)]
    assert sampled[0].coc_token_ids == sampled[1].coc_token_ids
    assert all(plan.accepted_lengths for plan in sampled)
    assert all(sum(p.accepted_lengths) + 1 == p.tokens_generated for p in sampled)
    assert any(plan.coc_token_ids != greedy.coc_token_ids for plan in sampled)


def test_a_window_gets_its_plan_whatever_came_before(parts):
    """Noise is seeded by the window's t0: the same window after other windows (full
    prefill, streaming off, no CoC drafted from the window before, so the same computation)
    or with another sequence number draws the same samples."""
    first = engine(parts, streaming=False, coc_reuse=False, num_samples=2).step(window(3))
    eng = engine(parts, streaming=False, coc_reuse=False, num_samples=2)
    eng.step(window(0))
    again = window(3)
    again.sequence = 17
    later = eng.step(again)
    np.testing.assert_array_equal(later.trajectories, first.trajectories)
    assert not np.allclose(eng.step(window(4)).trajectories, first.trajectories)


def test_reset_and_discontinuity_force_a_full_prefill(parts):
    eng = engine(parts)
    assert [p.full_prefill for p in run(eng, (0, 1, 2))] == [True, False, False]
    assert not eng.step(window(4)).full_prefill
    assert eng.step(window(8)).prefill_reason == "no frame shared with the previous window"
    assert eng.step(window(8)).prefill_reason == "frames are not the previous window's shifted"
    streamed = eng.step(window(9))
    assert not streamed.full_prefill and streamed.prefill_reason == ""
    eng.reset()
    assert eng.step(window(6)).prefill_reason == "first window"
    moved = window(7)
    moved.time_base_reset = True
    assert eng.step(moved).prefill_reason == "time base reset"


@pytest.mark.parametrize("bad,match", [
    (dict(cams=3), "3 cameras"),
    (dict(frames=2), "2 frames"),
    (dict(size=(48, 200)), "aspect ratio"),
    (dict(size=(8, 8)), "at least"),
])
def test_bad_window_raises_a_clear_error(parts, bad, match):
    eng = engine(parts)
    eng.step(window(0))
    with pytest.raises(ValueError, match=match):
        eng.step(window(1, **bad))
    assert not eng.step(window(1)).full_prefill


def test_bad_history_and_config_raise(parts):
    model, tok, drafter = parts
    eng = engine(parts)
    w = window(0)
    short = Window(t0=w.t0, images=w.images, image_stamps=w.image_stamps,
                   ego_history=w.ego_history[:10])
    with pytest.raises(ValueError, match="10 poses"):
        eng.step(short)
    with pytest.raises(ConfigError, match="drafter"):
        Engine(model, tok, None, EngineConfig())
    with pytest.raises(ConfigError, match="bfloat16"):
        Engine(model, tok, drafter, EngineConfig(dtype="bfloat16"))
    with pytest.raises(ConfigError, match="temperature"):
        EngineConfig(temperature=-0.5)
    with pytest.raises(ConfigError, match="cuda"):
        EngineConfig(cuda_graphs=True)


def test_load_from_a_model_directory(parts, tmp_path):
    model, tok, drafter = parts
    save_model_dir(model, model.cfg, tok, tmp_path)
    with pytest.raises(ConfigError, match=DRAFTER_FILE):
        Engine.load(tmp_path, EngineConfig())
    drafter.save_safetensors(tmp_path / DRAFTER_FILE)
    loaded = Engine.load(tmp_path, EngineConfig(max_coc_tokens=MAX_COC))
    ours, theirs = loaded.step(window(0)), engine(parts).step(window(0))
    assert ours.coc_token_ids == theirs.coc_token_ids
    np.testing.assert_array_equal(ours.trajectories, theirs.trajectories)


def test_warmup_leaves_no_streaming_state(parts):
    eng = engine(parts)
    eng.warmup()
    assert eng.step(window(0)).full_prefill


def test_engine_config_round_trip():
    cfg = EngineConfig(num_samples=6, streaming=False)
    assert EngineConfig.from_dict(cfg.to_dict()) == cfg
    assert dataclasses.asdict(EngineConfig.baseline())["speculative"] is False


def test_stage_timer_reports_every_stage():
    timer = StageTimer("cpu")
    assert timer.result() == {name: 0.0 for name in STAGES}
    with timer.stage("encode"):
        torch.ones(8).sum()
    with timer.stage("action"):
        torch.ones(8).sum()
    result = timer.result()
    assert set(result) == set(STAGES) and result["prefill"] == 0.0
    assert result["total"] >= result["encode"] + result["action"] > 0
    with pytest.raises(ValueError, match="twice"):
        with timer.stage("encode"):
            pass
    with pytest.raises(ValueError, match="unknown stage"):
        with timer.stage("total"):
            pass


def test_float32_rounding_moves_trajectories_within_the_reorder_tolerance(parts):
    """The bound behind FLOAT32_REORDER_ATOL_M: every backbone linear output perturbed by
    2**-24 relative (one rounding) moves the plans, but by less than the tolerance."""
    model = parts[0]
    generator = torch.Generator().manual_seed(1)

    def rounding(module, inputs, out):
        return out * (1 + 2.0 ** -24 * torch.randn(out.shape, generator=generator))

    plain = run(engine(parts, num_samples=2), steps=(0, 1, 2))
    handles = [m.register_forward_hook(rounding) for m in model.vlm.language_model.modules()
               if isinstance(m, torch.nn.Linear)]
    try:
        perturbed = run(engine(parts, num_samples=2), steps=(0, 1, 2))
    finally:
        for handle in handles:
            handle.remove()
    moved = [np.abs(a.trajectories - b.trajectories).max() for a, b in zip(plain, perturbed)]
    assert [a.coc_token_ids for a in plain] == [b.coc_token_ids for b in perturbed]
    assert 0 < max(moved) < FLOAT32_REORDER_ATOL_M / 2, moved
