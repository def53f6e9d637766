import pytest
import torch

from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.train.action_reward import repeat_cache, trajectory_error
from flashdrive_ros.train.drafter_data import IGNORE
from flashdrive_ros.train.drafter_rl import RLConfig
from flashdrive_ros.train.grpo import (
    anchor_positions,
    group_advantages,
    kl_to_reference,
    policy_loss,
)
from flashdrive_ros.train.rl_rollouts import (
    contaminated_cocs,
    first_rejected,
    rejected_positions,
    sample_rollouts,
    token_match,
    wrong_positions,
)

V = 6


def _logits(tokens: list[list[int]], scale: float = 5.0) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(tokens), V).float() * scale


def test_group_advantages_normalise_within_each_group():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 2.0, 2.0, 2.0, 2.0]])
    adv = group_advantages(rewards)
    torch.testing.assert_close(adv[0].mean(), torch.tensor(0.0))
    torch.testing.assert_close(adv[0].std(correction=0), torch.tensor(1.0), atol=1e-5, rtol=0)
    torch.testing.assert_close(adv[0], (rewards[0] - 3.0) / 2.0 ** 0.5, atol=1e-5, rtol=0)
    assert torch.equal(adv[1], torch.zeros(5))
    shifted = group_advantages(rewards * 10 + 7)
    torch.testing.assert_close(shifted, adv, atol=1e-5, rtol=0)


def test_anchor_sets_static_and_policy():
    labels = torch.tensor([[1, 2, 3, IGNORE]])
    reference = _logits([[1, 2, 0, 0]])
    policy = _logits([[1, 0, 3, 0]])
    assert anchor_positions("static", reference, policy, labels).tolist() == [
        [True, True, False, False]]
    assert anchor_positions("policy", reference, policy, labels).tolist() == [
        [True, False, True, False]]
    with pytest.raises(ValueError, match="anchor"):
        anchor_positions("live", reference, policy, labels)


def test_kl_is_zero_on_equal_distributions_and_counts_only_anchors():
    a = torch.randn(2, 3, V)
    b = torch.randn(2, 3, V)
    everywhere = torch.ones(2, 3, dtype=torch.bool)
    assert float(kl_to_reference(a, a, everywhere)) == pytest.approx(0.0, abs=1e-6)
    assert float(kl_to_reference(a, b, everywhere)) > 0
    one = torch.zeros(2, 3, dtype=torch.bool)
    one[1, 2] = True
    p = torch.log_softmax(a[1, 2], -1)
    q = torch.log_softmax(b[1, 2], -1)
    torch.testing.assert_close(kl_to_reference(a, b, one), (p.exp() * (p - q)).sum())
    assert float(kl_to_reference(a, b, torch.zeros_like(one))) == 0.0


def test_rollouts_are_stochastic_only_where_the_greedy_drafter_is_wrong():
    labels = torch.tensor([[1, 2, 3, IGNORE]])
    logits = _logits([[1, 4, 3, 0]])
    stochastic = wrong_positions(logits, labels)
    assert stochastic.tolist() == [[False, True, False, False]]
    probs = torch.zeros(1, 4, V)
    probs[0, :, 5] = 1.0
    tokens = sample_rollouts(probs, labels, stochastic, 5, torch.Generator().manual_seed(0))
    assert tokens.shape == (1, 5, 4)
    assert tokens[0].tolist() == [[1, 5, 3, IGNORE]] * 5
    spread = torch.full((1, 4, V), 1.0 / V)
    tokens = sample_rollouts(spread, labels, stochastic, 200, torch.Generator().manual_seed(0))
    assert set(tokens[0, :, 1].tolist()) == set(range(V))
    assert (tokens[0, :, [0, 2, 3]] == labels[0, [0, 2, 3]]).all()


def test_contamination_takes_the_first_n_rejected_positions():
    labels = torch.tensor([[1, 2, 3, 4, IGNORE]])
    tokens = torch.tensor([[[1, 9, 3, 8, 7], [5, 2, 6, 4, 7], [1, 2, 3, 4, 7]]])
    rejected = rejected_positions(tokens, labels)
    assert rejected[0].tolist() == [[False, True, False, True, False],
                                    [True, False, True, False, False],
                                    [False] * 5]
    first = first_rejected(rejected, 1)
    assert first[0].tolist() == [[False, True, False, False, False],
                                 [True, False, False, False, False], [False] * 5]
    stochastic = torch.tensor([[False, True, True, True, False]])
    match = token_match(tokens, labels, stochastic)
    torch.testing.assert_close(match, torch.tensor([[1 / 3, 2 / 3, 1.0]]))


def test_contaminated_cocs_substitute_and_end_like_the_engine():
    cot_end, future = 90, 91
    coc = [10, 11, 12, 13, cot_end]
    labels = [12, 13, cot_end, IGNORE]
    tokens = torch.tensor([[40, 13, cot_end, 50], [12, cot_end, 41, 50], [12, 13, 42, 50]])
    substitute = torch.tensor([[True, False, False, True], [False, True, False, False],
                               [False, False, True, False]])
    out = contaminated_cocs(coc, 2, labels, tokens, substitute, cot_end, future)
    assert out == [[10, 11, 12, 13, cot_end, future],
                   [10, 11, 40, 13, cot_end, future],
                   [10, 11, 12, cot_end, future],
                   [10, 11, 12, 13, 42, cot_end, future]]
    capped = contaminated_cocs([10, 11, 12], 1, [11, 12], torch.tensor([[30, 12]]),
                               torch.tensor([[True, False]]), cot_end, future)
    assert capped == [[10, 11, 12, cot_end, future], [10, 30, 12, cot_end, future]]


def test_policy_gradient_raises_the_advantaged_rollout():
    logits = torch.zeros(1, 2, V, requires_grad=True)
    tokens = torch.tensor([[[1, 4], [1, 5]]])
    stochastic = torch.tensor([[False, True]])
    advantages = torch.tensor([[1.0, -1.0]])
    policy_loss(logits, tokens, stochastic, advantages).backward()
    grad = logits.grad[0]
    assert grad[1, 4] < 0 < grad[1, 5]
    assert torch.equal(grad[0], torch.zeros(V))


def test_repeat_cache_and_trajectory_error():
    cache = KVCache(2, 2, 1, 5, 4)
    cache.k.normal_()
    cache.positions[:, :, :3] = torch.arange(3)
    cache.length = 3
    out = repeat_cache(cache, 3, 8)
    assert out.k.shape == (2, 6, 1, 8, 4) and out.length == 3
    assert torch.equal(out.k[:, 4, :, :3], cache.k[:, 1, :, :3])
    assert torch.equal(out.positions[:, 5, :3], cache.positions[:, 1, :3])
    xy = torch.zeros(1, 3, 4, 2)
    xy[0, 1, :, 0] = 1.0
    xy[0, 2, 2, 1] = 2.0
    torch.testing.assert_close(trajectory_error(xy), torch.tensor([[1.0, 1.0]]))


def test_rl_config_validation():
    RLConfig()
    for bad in (dict(anchor="live"), dict(rollouts=1), dict(candidates=2, prompts=4),
                dict(beta=-1.0), dict(block_sizes=(1,))):
        with pytest.raises(ValueError):
            RLConfig(**bad)
