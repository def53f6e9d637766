import dataclasses

import pytest
import torch
from helpers.windows import window

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.model.drafter_file import build_drafter

WHOLE_PROMPT = 4096


pytestmark = pytest.mark.usefixtures("one_thread")


def _engine(parts, kind: str | None, rotary: str = "flat", **changes) -> Engine:
    model, tok, _ = parts
    drafter = None
    if kind is not None:
        torch.manual_seed(3)
        cfg = dataclasses.replace(model.cfg.drafter, kind=kind, rotary=rotary,
                                  context_len=WHOLE_PROMPT,
                                  num_hidden_layers=1 if kind == "eagle3" else 2)
        drafter = build_drafter(cfg, model.cfg.text).eval()
    return Engine(model, tok, drafter,
                  EngineConfig(max_coc_tokens=12, speculative=kind is not None, **changes))


class RecordingProposer:
    def __init__(self, inner) -> None:
        self.inner = inner
        self.block_size = inner.block_size
        self.context_len = inner.context_len
        self.feature_layers = inner.feature_layers
        self.requests = []

    def propose(self, request):
        self.requests.append(request)
        return self.inner.propose(request)


@pytest.mark.parametrize("kind,rotary", [("dflash", "mrope"), ("eagle3", "flat")])
def test_whole_prompt_context_streams_losslessly(parts, kind, rotary):
    reference = _engine(parts, None)
    fast = _engine(parts, kind, rotary, coc_reuse=False)
    recorder = RecordingProposer(fast.proposer)
    fast.proposer = recorder
    n = fast.frame_layout.prompt_length
    store = fast.stream.features
    snapshot = None
    for step in range(3):
        want = reference.step(window(step))
        recorder.requests.clear()
        got = fast.step(window(step))
        assert got.full_prefill == (step == 0)
        assert got.coc_token_ids == want.coc_token_ids
        first = recorder.requests[0]
        assert torch.equal(first.feature_slots, torch.arange(n))
        assert torch.equal(first.feature_ids, store.ids[:n])
        assert bool(store.written[:n].all())
        if snapshot is not None:
            recomputed = torch.zeros(n, dtype=torch.bool)
            layout = fast.frame_layout
            recomputed[layout.slot_of_prompt_index(fast.stream.shift)[
                layout.newest_frames_and_tail()]] = True
            assert torch.equal(store.features[:n][~recomputed], snapshot[~recomputed])
            assert not torch.allclose(store.features[:n][recomputed], snapshot[recomputed])
        snapshot = store.features[:n].clone()


def test_full_prefill_store_holds_the_prefill_features(parts):
    fast = _engine(parts, "dflash", streaming=False)
    recorder = RecordingProposer(fast.proposer)
    fast.proposer = recorder
    fast.step(window(0))
    fast.step(window(1))
    request = recorder.requests[-1]
    n = fast.frame_layout.prompt_length
    assert request.features.shape[0] >= n
    assert torch.equal(request.feature_slots[:n], torch.arange(n))
