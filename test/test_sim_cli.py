"""flashdrive-sim command line: contract flags, exit codes, the installed console script."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rosbags.rosbag2 import Reader

from flashdrive_ros.sim.cli import main
from flashdrive_ros.sim.topics import ODOMETRY_TOPIC, camera_image_topic


def test_cli_writes_a_bag_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "drive"
    args = ["--out", str(out), "--seconds", "1", "--seed", "2", "--format", "sqlite3",
            "--width", "64", "--height", "48", "--workers", "1"]
    assert main(args) == 0
    with Reader(out) as reader:
        topics = {c.topic: c.msgcount for c in reader.connections}
    assert topics[ODOMETRY_TOPIC] == 51
    assert topics[camera_image_topic("camera_front_tele_30fov")] == 11
    assert main(args) == 2
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [["--seconds", "0"], ["--format", "bag"], ["--width", "3"]])
def test_cli_rejects_bad_flags(tmp_path, bad):
    with pytest.raises(SystemExit) as exc:
        main(["--out", str(tmp_path / "x"), *bad])
    assert exc.value.code == 2


SCRIPT = shutil.which("flashdrive-sim", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(SCRIPT is None, reason="console script not installed (pip install -e .)")
def test_console_script_runs(tmp_path):
    proc = subprocess.run([SCRIPT, "--out", str(tmp_path / "b"), "--seconds", "0.5",
                           "--seed", "1", "--width", "64", "--height", "48"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b" / "metadata.yaml").is_file()
