"""Training shards: round trip against a fresh simulation of the same seed."""

import json

import numpy as np
import pytest

from flashdrive_ros.engine.types import Window
from flashdrive_ros.sim.dataset import load_shard, read_index, write_dataset
from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.sim.frames import render_frames
from flashdrive_ros.sim.labels import DECISIONS, label_drive
from flashdrive_ros.sim.topics import CAMERA_NAMES

W, H, SECONDS = 64, 48, 2.5


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("ds")
    summary = write_dataset(out, [3, 9], SECONDS, W, H, stride=2)
    return out, summary


def test_index_describes_the_shards(dataset):
    out, summary = dataset
    index = read_index(out)
    assert summary.shards == 2 and index["windows"] == summary.windows
    assert index["camera_names"] == list(CAMERA_NAMES)
    assert (index["width"], index["height"]) == (W, H)
    assert [s["seed"] for s in index["shards"]] == [3, 9]
    per_seed = len(range(15, int(SECONDS * 10) + 1, 2))
    assert all(s["windows"] == per_seed for s in index["shards"])
    k = np.array(index["intrinsics"]["camera_front_wide_120fov"])
    assert k.shape == (3, 3) and k[0, 2] == W / 2
    assert np.array(index["extrinsics"]["camera_front_tele_30fov"]).shape == (4, 4)


def test_shard_round_trip_matches_a_fresh_simulation(dataset):
    out, _ = dataset
    index = read_index(out)
    shard = load_shard(out / index["shards"][0]["file"])
    log = simulate(3, SECONDS)
    labels = label_drive(log.infos, log.frame_count)
    frames = np.stack([np.stack(f) for f in render_frames(log, W, H)])
    ks = np.arange(15, log.frame_count, 2)
    n = len(ks)
    assert shard["images"].shape == (n, 4, 4, H, W, 3) and shard["images"].dtype == np.uint8
    assert shard["ego_history"].shape == (n, 16, 4) and shard["future"].shape == (n, 64, 3)
    assert int(shard["seed"]) == 3
    for j, k in enumerate(ks):
        for frame in range(4):
            assert np.array_equal(shard["images"][j, :, frame], frames[k - 3 + frame])
        assert np.allclose(shard["future"][j], log.future(k), atol=1e-5)
        assert np.allclose(shard["ego_history"][j], log.history(k), atol=1e-5)
        assert shard["coc"][j] == labels[k].coc and shard["decision"][j] == labels[k].decision
        assert json.loads(shard["tags"][j]) == list(labels[k].tags)
        assert shard["t0"][j] == pytest.approx(0.1 * k)
    assert set(shard["decision"]) <= set(DECISIONS)
    window = Window(t0=float(shard["t0"][0]), images=shard["images"][0],
                    image_stamps=np.tile(shard["t0"][0] + np.arange(-0.3, 0.01, 0.1), (4, 1)),
                    ego_history=shard["ego_history"][0].astype(np.float64),
                    speed=float(shard["v0"][0]))
    assert window.images.shape == (4, 4, H, W, 3)


def test_dataset_refuses_bad_requests(dataset, tmp_path):
    out, _ = dataset
    with pytest.raises(FileExistsError):
        write_dataset(out, [1], SECONDS, W, H)
    with pytest.raises(ValueError, match="seed"):
        write_dataset(tmp_path / "a", [], SECONDS, W, H)
    with pytest.raises(ValueError, match="repeat"):
        write_dataset(tmp_path / "b", [1, 1], SECONDS, W, H)
    with pytest.raises(ValueError, match="history"):
        write_dataset(tmp_path / "c", [1], 1.0, W, H)
    np.savez(tmp_path / "broken.npz", frames=np.zeros((1, 4, H, W, 3), np.uint8))
    with pytest.raises(ValueError, match="lacks"):
        load_shard(tmp_path / "broken.npz")
    with pytest.raises(FileNotFoundError):
        read_index(tmp_path / "nowhere")
