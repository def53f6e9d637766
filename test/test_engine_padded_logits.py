"""lm_head as weight @ rows^T with the rows padded to a multiple of 8, against the plain
lm_head: the same logits for any row count and the same plans from the engine."""

import numpy as np
import pytest
import torch
from helpers.engines import plans_with_switch

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.padded_logits import PaddedRowLogits
from flashdrive_ros.model.config import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("shape", [(1, 48), (7, 48), (1, 9, 48), (2, 3, 16, 48)])
def test_padded_row_logits_equal_the_lm_head(shape):
    torch.manual_seed(len(shape))
    lm_head = torch.nn.Linear(48, 301, bias=False)
    hidden = torch.randn(*shape)
    got = PaddedRowLogits(lm_head)(hidden)
    assert got.shape == (*shape[:-1], 301)
    torch.testing.assert_close(got, lm_head(hidden), rtol=1e-5, atol=1e-5)


def test_padded_row_logits_refuse_a_bias():
    with pytest.raises(ValueError, match="bias"):
        PaddedRowLogits(torch.nn.Linear(4, 5))


def test_engine_plans_match_with_and_without_padded_logits(parts):
    runs = plans_with_switch(parts, "padded_logits")
    for padded, (eng, _) in runs.items():
        assert isinstance(eng.target.lm_head, PaddedRowLogits) == padded
        assert isinstance(eng.proposer.lm_head, PaddedRowLogits) == padded
    for a, b in zip(runs[True][1], runs[False][1]):
        assert a.coc_token_ids == b.coc_token_ids
        assert a.accepted_lengths == b.accepted_lengths
        np.testing.assert_allclose(a.trajectories, b.trajectories, rtol=0, atol=1e-4)


def test_padded_logits_defaults_and_refusals():
    assert EngineConfig().padded_logits is False
    assert EngineConfig(device="cuda").padded_logits is True
    assert EngineConfig.baseline().padded_logits is False
    assert EngineConfig(padded_logits=True).padded_logits is True
    with pytest.raises(ConfigError, match="padded_logits"):
        EngineConfig(padded_logits=1)
