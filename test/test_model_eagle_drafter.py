import dataclasses

import pytest
import torch
from helpers.drafters import with_target_head

from flashdrive_ros.model.config import ConfigError, tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.drafter_file import load_drafter
from flashdrive_ros.model.eagle_drafter import EagleDrafter

CFG = tiny(vocab_size=300)
EAGLE = dataclasses.replace(CFG.drafter, kind="eagle3", num_hidden_layers=1)
C, K = 5, 6


def _drafter(rotary: str = "flat", seed: int = 0):
    torch.manual_seed(seed)
    drafter = EagleDrafter(dataclasses.replace(EAGLE, rotary=rotary), CFG.text).eval()
    return with_target_head(drafter, CFG.text)


def _inputs(drafter: EagleDrafter, batch: int = 2, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, C, drafter.feature_size, generator=g)
    ids = torch.randint(0, CFG.text.vocab_size, (batch, C), generator=g)
    pending = torch.randint(0, CFG.text.vocab_size, (batch,), generator=g)
    flat = (torch.arange(C + K) + 11).expand(batch, -1).clone()
    return features, ids, pending, flat


def _greedy(drafter, features, ids, pending, pos, embed, head, mask=None):
    return drafter.chain_logits(features, ids, pending, pos, embed, head,
                                lambda i, logits: logits.argmax(-1), mask)


def test_teacher_forcing_with_the_greedy_chain_reproduces_it():
    drafter, embed, head = _drafter()
    features, ids, pending, flat = _inputs(drafter)
    with torch.no_grad():
        logits, tokens = _greedy(drafter, features, ids, pending, flat, embed, head)
        forced = drafter.teacher_forced_logits(features, ids, pending, tokens, flat, embed, head)
    assert logits.shape == (2, K - 1, CFG.text.vocab_size) and tokens.shape == (2, K - 1)
    torch.testing.assert_close(forced, logits)


def test_chain_is_causal_and_reads_its_context():
    drafter, embed, head = _drafter()
    features, ids, pending, flat = _inputs(drafter, batch=1)
    labels = torch.randint(0, 300, (1, K - 1))
    with torch.no_grad():
        base = drafter.teacher_forced_logits(features, ids, pending, labels, flat, embed, head)
        later = labels.clone()
        later[0, 3] = (later[0, 3] + 1) % 300
        moved = drafter.teacher_forced_logits(features, ids, pending, later, flat, embed, head)
        torch.testing.assert_close(moved[:, :4], base[:, :4])
        assert not torch.allclose(moved[:, 4], base[:, 4])
        other = ids.clone()
        other[0, 2] = (other[0, 2] + 1) % 300
        changed = drafter.teacher_forced_logits(features, other, pending, labels, flat, embed,
                                                head)
        assert not torch.allclose(changed, base)
        first_id = ids.clone()
        first_id[0, 0] = (first_id[0, 0] + 1) % 300
        same = drafter.teacher_forced_logits(features, first_id, pending, labels, flat, embed,
                                             head)
        torch.testing.assert_close(same, base)


def test_masked_context_entries_equal_a_shorter_context():
    drafter, embed, head = _drafter("mrope")
    features, ids, pending, flat = _inputs(drafter, batch=1)
    pos = torch.stack([flat, flat // 2, flat % 5])
    labels = torch.randint(0, 300, (1, K - 1))
    mask = torch.ones(1, C, dtype=torch.bool)
    mask[0, :2] = False
    with torch.no_grad():
        padded = drafter.teacher_forced_logits(features, ids, pending, labels, pos, embed, head,
                                               mask)
        short = drafter.teacher_forced_logits(features[:, 2:], ids[:, 2:], pending, labels,
                                              pos[..., 2:], embed, head)
    torch.testing.assert_close(padded, short, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("rotary", ["flat", "mrope"])
def test_rotary_is_relative(rotary):
    drafter, embed, head = _drafter(rotary)
    features, ids, pending, flat = _inputs(drafter)
    pos = flat if rotary == "flat" else torch.stack([flat, flat // 2, flat % 7])
    labels = torch.randint(0, 300, (2, K - 1))
    with torch.no_grad():
        base = drafter.teacher_forced_logits(features, ids, pending, labels, pos, embed, head)
        shifted = drafter.teacher_forced_logits(features, ids, pending, labels, pos + 50, embed,
                                                head)
    torch.testing.assert_close(shifted, base, atol=1e-4, rtol=1e-4)


def test_config_and_input_checks():
    with pytest.raises(ValueError, match="eagle3"):
        EagleDrafter(CFG.drafter, CFG.text)
    with pytest.raises(ValueError, match="one decoder layer"):
        EagleDrafter(dataclasses.replace(EAGLE, num_hidden_layers=2), CFG.text)
    drafter, embed, head = _drafter()
    features, ids, pending, flat = _inputs(drafter)
    with pytest.raises(ValueError, match="context_ids"):
        _greedy(drafter, features, ids[:, 1:], pending, flat, embed, head)
    with pytest.raises(ValueError, match="positions"):
        _greedy(drafter, features, ids, pending, flat[:, :C + 1], embed, head)


def test_files_carry_their_config(tmp_path):
    drafter, embed, head = _drafter("mrope")
    path = tmp_path / "drafter_eagle.safetensors"
    drafter.save_safetensors(path)
    loaded = load_drafter(path, CFG.text, CFG.drafter)
    assert isinstance(loaded, EagleDrafter) and loaded.cfg == drafter.cfg
    features, ids, pending, flat = _inputs(drafter)
    pos = flat.expand(3, -1, -1)
    with torch.no_grad():
        torch.testing.assert_close(_greedy(loaded, features, ids, pending, pos, embed, head)[0],
                                   _greedy(drafter, features, ids, pending, pos, embed, head)[0])
    dflash = tmp_path / "drafter.safetensors"
    Drafter(CFG.drafter, CFG.text).save_safetensors(dflash)
    assert isinstance(load_drafter(dflash, CFG.text, None), Drafter)
    from safetensors.torch import load_file, save_file
    bare = tmp_path / "bare.safetensors"
    save_file(load_file(str(dflash)), str(bare))
    assert load_drafter(bare, CFG.text, CFG.drafter).cfg == CFG.drafter
    with pytest.raises(ConfigError, match="no drafter config"):
        load_drafter(bare, CFG.text, None)
