"""flashdrive-replay command line: every bad input is one clear error and exit code 2."""

import importlib.util

import pytest
from helpers.bags import write_drive_bag
from helpers.tiny_model import make_tiny_model_dir
from rosbags.rosbag2 import StoragePlugin, Writer

from flashdrive_ros.eval.cli import main, options_from_args, parser
from flashdrive_ros.eval.topics import TopicMapping


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def truncated(path):
    bag = write_drive_bag(path, seconds=0.3, storage="sqlite3")
    storage = next(bag.glob("*.db3"))
    with open(storage, "r+b") as f:
        f.truncate(storage.stat().st_size // 3)
    return bag


def empty(path):
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP):
        pass
    return path


@pytest.mark.parametrize("make_bag, message", [
    (lambda p: p / "missing", "bag not found"),
    (truncated, "cannot open bag"),
    (empty, "holds no messages"),
    (lambda p: write_drive_bag(p, seconds=0.3, skip_topics=(TopicMapping().odometry,)),
     "lacks messages on ['/localization/odometry']"),
])
def test_bad_bags_exit_2_with_the_problem(tmp_path, capsys, make_bag, message):
    bag = make_bag(tmp_path / "bag")
    code, err = run_cli(capsys, bag, "--model-dir", tmp_path, "--out", tmp_path / "out",
                        "--quiet")
    assert code == 2
    assert err.startswith("flashdrive-replay: error: ")
    assert message in err
    assert "Traceback" not in err


def test_missing_model_dir_and_bad_options(tmp_path, capsys):
    bag = write_drive_bag(tmp_path / "bag", seconds=0.3)
    code, err = run_cli(capsys, bag, "--model-dir", tmp_path / "nomodel", "--out",
                        tmp_path / "out", "--quiet")
    assert code == 2 and "model directory not found" in err
    code, err = run_cli(capsys, bag, "--model-dir", tmp_path, "--out", tmp_path / "o",
                        "--rate", "0", "--quiet")
    assert code == 2 and "--rate must be > 0" in err
    code, err = run_cli(capsys, bag, "--model-dir", tmp_path, "--out", tmp_path / "o",
                        "--topics-yaml", tmp_path / "none.yaml", "--quiet")
    assert code == 2 and "topics YAML not found" in err
    code, err = run_cli(capsys, bag, "--model-dir", tmp_path, "--out", tmp_path / "o",
                        "--through-ros", "--max-windows", "3", "--quiet")
    assert code == 2 and "--max-windows applies to the offline replay" in err


def test_camera_count_must_match_the_model(tmp_path, capsys):
    from flashdrive_ros.model.config import tiny

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    tiny().save(model_dir / "config.json")
    topics = TopicMapping(cameras=("/c0", "/c1"), labels=None)
    bag = write_drive_bag(tmp_path / "bag", seconds=0.3, topics=topics, labels=False)
    code, err = run_cli(capsys, bag, "--model-dir", model_dir, "--out", tmp_path / "out",
                        "--camera-topics", "/c0,/c1", "--labels-topic", "", "--quiet")
    assert code == 2
    assert "the model takes 4 cameras, the topic mapping names 2" in err


def test_command_line_topic_overrides(tmp_path):
    yaml_file = tmp_path / "t.yaml"
    yaml_file.write_text("cameras: [/a, /b]\nodometry: /o\n")
    args = parser().parse_args(["bag", "--out", "o", "--model-dir", "m", "--topics-yaml",
                                str(yaml_file), "--odom-topic", "/odom2",
                                "--labels-topic", ""])
    options = options_from_args(args)
    assert options.topics == TopicMapping(cameras=("/a", "/b"), odometry="/odom2", labels=None)


def test_backend_option_reaches_the_engines_and_the_node(tmp_path, capsys):
    from flashdrive_ros.eval.through_ros import node_parameters

    args = parser().parse_args(["bag", "--out", "o", "--model-dir", "m", "--backend",
                                "tensorrt", "--device", "cuda"])
    options = options_from_args(args)
    assert options.backend == "tensorrt"
    assert node_parameters(options, "flashdrive", True)["backend"] == "tensorrt"
    assert options_from_args(parser().parse_args(["b", "--out", "o"])).backend == "torch"
    bag = write_drive_bag(tmp_path / "bag", seconds=0.3)
    code, err = run_cli(capsys, bag, "--model-dir", tmp_path, "--out", tmp_path / "o",
                        "--backend", "tensorrt", "--device", "cpu", "--quiet")
    assert code == 2 and "--backend tensorrt needs a CUDA device" in err


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None,
                    reason="TensorRT is installed here")
def test_tensorrt_backend_without_tensorrt_exits_2_with_the_reason(tmp_path, capsys):
    bag = write_drive_bag(tmp_path / "bag", seconds=0.3)
    code, err = run_cli(capsys, bag, "--model-dir", tmp_path, "--out", tmp_path / "o",
                        "--backend", "tensorrt", "--device", "cuda", "--quiet")
    assert code == 2 and "import tensorrt" in err and "Traceback" not in err


def test_drafter_file_option_reaches_the_engines_and_the_node(tmp_path, capsys):
    from flashdrive_ros.eval.replay import ReplayOptions, load_engines
    from flashdrive_ros.eval.through_ros import node_parameters

    options = options_from_args(parser().parse_args(
        ["b", "--out", "o", "--model-dir", "m", "--drafter-file", "drafter_mrope.safetensors"]))
    assert node_parameters(options, "flashdrive", False)["drafter_file"] == \
        "drafter_mrope.safetensors"
    default = options_from_args(parser().parse_args(["b", "--out", "o", "--model-dir", "m"]))
    assert "drafter_file" not in node_parameters(default, "flashdrive", False)
    model_dir = make_tiny_model_dir(tmp_path / "model")
    (model_dir / "drafter.safetensors").rename(model_dir / "drafter_other.safetensors")
    engines = load_engines(ReplayOptions(bag="b", model_dir=model_dir, out_dir="o",
                                         device="cpu", drafter_file="drafter_other.safetensors"))
    assert engines["flashdrive"].drafter is not None
    bag = write_drive_bag(tmp_path / "bag", seconds=0.3)
    code, err = run_cli(capsys, bag, "--model-dir", model_dir, "--out", tmp_path / "o",
                        "--drafter-file", "../drafter.pt", "--quiet")
    assert code == 2 and "--drafter-file must be a .safetensors file name" in err
    code, err = run_cli(capsys, bag, "--model-dir", model_dir, "--out", tmp_path / "o2",
                        "--device", "cpu", "--quiet")
    assert code == 2 and "cannot load the flashdrive engine" in err


def test_node_params_reach_the_node_through_ros_only(tmp_path, capsys):
    from flashdrive_ros.eval.through_ros import node_parameters

    options = options_from_args(parser().parse_args(
        ["b", "--out", "o", "--model-dir", "m", "--through-ros", "--node-param",
         "act_apart=true", "--node-param", "max_plan_age_s=0.8", "--node-param",
         "coc_reuse=false"]))
    params = node_parameters(options, "flashdrive", False)
    assert params["act_apart"] is True and params["coc_reuse"] is False
    assert params["max_plan_age_s"] == 0.8
    bag = write_drive_bag(tmp_path / "bag", seconds=0.3)
    for argv, message in [
            (["--node-param", "act_apart=true"], "applies through ROS only"),
            (["--through-ros", "--node-param", "act_apart"], "wants NAME=VALUE"),
            (["--through-ros", "--node-param", "warp_drive=1"],
             "['warp_drive'] are not drive_node parameters"),
            (["--through-ros", "--node-param", "num_samples=3"], "use --num-samples"),
            (["--through-ros", "--node-param", "max_plan_age_s=[1"], "is not a YAML value"),
            (["--through-ros", "--node-param", "max_plan_age_s=-1"], "max_plan_age_s")]:
        code, err = run_cli(capsys, bag, "--model-dir", tmp_path, "--out", tmp_path / "o",
                            "--quiet", *argv)
        assert code == 2 and message in err, (argv, err)
        assert "Traceback" not in err
