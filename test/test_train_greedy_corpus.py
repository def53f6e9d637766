import torch

from flashdrive_ros.engine.decoding import StopRule, Target, greedy_decode, prefill
from flashdrive_ros.model.backbone import TextBackbone
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.train.greedy_corpus import greedy_rows


def test_batched_greedy_matches_engine_greedy_and_features():
    torch.manual_seed(0)
    cfg = tiny(vocab_size=40).text
    backbone = TextBackbone(cfg).eval()
    head = torch.nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
    layers = (1, 3)
    b, t, m, c = 3, 10, 9, 4
    embeds = torch.randn(b, t, cfg.hidden_size)
    positions = torch.arange(t).view(1, 1, t).expand(3, b, t).clone()
    positions[1:, :, 2:6] = 2
    visual = torch.zeros(b, t, dtype=torch.bool)
    free = greedy_rows(backbone, head, embeds, positions, visual, [], layers, c, m, -1)
    cot_end = int(free.tokens[0, 4])
    rows = greedy_rows(backbone, head, embeds, positions, visual, [], layers, c, m, cot_end)
    assert 1 < int(rows.lengths[0]) <= 5
    target = Target(backbone, head, feature_layers=layers)
    stop = StopRule(cot_end_id=cot_end, traj_future_start_id=(cot_end + 1) % 40,
                    max_new_tokens=m)
    for row in range(b):
        cache = KVCache(cfg.num_hidden_layers, 1, cfg.num_key_value_heads, t + m + 3,
                        cfg.head_dim)
        out = prefill(target, embeds[row:row + 1], positions[:, row:row + 1], cache,
                      context_len=c)
        result = greedy_decode(target, out, cache, stop)
        generated = result.tokens[:-1] if result.stopped_by == "cot_end" else result.tokens[:-2]
        n = int(rows.lengths[row])
        assert rows.tokens[row, :n].tolist() == generated
        torch.testing.assert_close(rows.features[row, :c], out.features, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(rows.positions[:, row, :c], positions[:, row, t - c:])
        assert int(rows.positions[0, row, c]) == int(positions[:, row].max()) + 1
