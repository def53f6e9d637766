"""The package built as on a vehicle: colcon (colcon-core, colcon-ros and ament_package from
PyPI) builds a copy of it into a workspace of its own; the drive_node script of that install
tree, run by whichever python3 the environment puts first on PATH, is configured and
activated over DDS."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lifecycle_msgs.msg import Transition

from flashdrive_ros.ros import names
from flashdrive_ros.ros.harness.lifecycle_client import LifecycleClient
from flashdrive_ros.ros.harness.loopback import loopback_domain_id
from flashdrive_ros.ros.harness.node_process import log_tail, stop_process

pytestmark = [pytest.mark.ros, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "flashdrive_ros"
NOT_IN_A_CLONE = (".git", ".venv", "out", "build", "install", "log", "__pycache__",
                  "*.egg-info", ".pytest_cache", ".ruff_cache")
SHEBANG = "#!/usr/bin/env python3"
BUILD_TIMEOUT_S = 180
TRANSITION_TIMEOUT_S = 120.0


def sourced_env(install: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` after `. install/setup.sh`, as a shell on the vehicle has it."""
    out = subprocess.run(["sh", "-c", f'. "{install}/setup.sh" && env -0'], env=env,
                         check=True, capture_output=True, timeout=60).stdout
    return dict(line.split("=", 1) for line in out.decode().split("\0") if "=" in line)


def colcon_build(workspace: Path, *options: str) -> Path:
    """Build a copy of the package with colcon in `workspace`; its install folder."""
    shutil.copytree(ROOT, workspace / "src" / PACKAGE,
                    ignore=shutil.ignore_patterns(*NOT_IN_A_CLONE))
    env = dict(os.environ, COLCON_HOME=str(workspace / "colcon_home"))
    build = subprocess.run(
        [sys.executable, "-c", "import sys; from colcon_core.command import main; "
         "sys.exit(main())", "build", "--base-paths", "src", *options],
        cwd=workspace, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return workspace / "install"


def assert_scripts_take_python3_from_the_environment(install: Path) -> None:
    scripts = install / PACKAGE / "lib" / PACKAGE
    assert (scripts / "drive_node").is_file()
    for script in scripts.iterdir():
        assert script.read_text().splitlines()[0] == SHEBANG, script
        assert os.access(script, os.X_OK), script


@pytest.fixture(scope="module")
def install_tree(tmp_path_factory) -> Path:
    return colcon_build(tmp_path_factory.mktemp("colcon_ws"))


@pytest.fixture(scope="module")
def vehicle_env(install_tree) -> dict[str, str]:
    """The sourced install tree, this interpreter's folder first on PATH (an activated
    environment), and no path into the source checkout."""
    source = str(ROOT)
    env = dict(os.environ,
               PATH=os.pathsep.join([str(Path(sys.executable).parent),
                                     os.environ.get("PATH", "")]),
               PYTHONPATH=os.pathsep.join(p for p in os.environ.get("PYTHONPATH", "").split(
                   os.pathsep) if p and Path(p).resolve() != Path(source)),
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", PYTHONUNBUFFERED="1")
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    return sourced_env(install_tree, env)


def test_installed_scripts_run_with_the_environments_python3(install_tree):
    assert_scripts_take_python3_from_the_environment(install_tree)


def test_symlink_install_scripts_run_with_the_environments_python3(tmp_path):
    assert_scripts_take_python3_from_the_environment(
        colcon_build(tmp_path, "--symlink-install"))


def test_the_install_tree_provides_the_package_and_its_data(install_tree, vehicle_env,
                                                           tmp_path):
    probe = ("import flashdrive_ros, flashdrive_ros.paths as p; "
             "print(flashdrive_ros.__file__); print(p.default_model_dir())")
    out = subprocess.run(["python3", "-c", probe], cwd=tmp_path, env=vehicle_env,
                         check=True, capture_output=True, text=True, timeout=60).stdout.split()
    module, model_dir = (Path(line) for line in out)
    assert module.is_relative_to(install_tree), module
    assert model_dir == install_tree / PACKAGE / "share" / PACKAGE / "models" / "default"
    assert (model_dir / "config.json").is_file()


def test_the_installed_drive_node_configures_and_activates(install_tree, vehicle_env,
                                                           client_node, tmp_path):
    log_file = tmp_path / "drive_node.log"
    script = install_tree / PACKAGE / "lib" / PACKAGE / "drive_node"
    with open(log_file, "w") as log:
        process = subprocess.Popen(
            [str(script), "--ros-args", "-p", "device:=cpu", "-p", "cpu_threads:=1"],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            env={**vehicle_env, "ROS_DOMAIN_ID": str(loopback_domain_id())})
    try:
        lifecycle = LifecycleClient(client_node, f"/{names.NODE_NAME}",
                                    alive=lambda: process.poll() is None)
        lifecycle.transition(Transition.TRANSITION_CONFIGURE, TRANSITION_TIMEOUT_S)
        lifecycle.transition(Transition.TRANSITION_ACTIVATE, TRANSITION_TIMEOUT_S)
        assert lifecycle.state() == "active"
    except Exception as exc:
        raise AssertionError(f"{exc}\ndrive_node log:\n{log_tail(log_file)}") from exc
    finally:
        stop_process(process)
    assert process.returncode == 0, log_tail(log_file)
