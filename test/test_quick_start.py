"""The README quick start: two make commands over a pinned virtualenv, and CI runs the second."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from flashdrive_ros.ros.harness.loopback import loopback_domain_id

ROOT = Path(__file__).resolve().parents[1]
TORCH_VERSION = "2.13.0"
REQUIRED_PACKAGES = {"torch", "tokenizers", "safetensors", "opencv-python-headless", "rosbags",
                     "pytest", "ruff", "ros-jazzy-rclpy", "ros-jazzy-rmw-fastrtps-cpp",
                     "ros-jazzy-std-msgs", "ros-jazzy-sensor-msgs", "ros-jazzy-nav-msgs",
                     "ros-jazzy-geometry-msgs", "ros-jazzy-visualization-msgs",
                     "ros-jazzy-diagnostic-msgs", "colcon-core", "colcon-ros",
                     "ros-jazzy-ament-package"}


def quick_start_commands() -> list[str]:
    section = ROOT.joinpath("README.md").read_text().split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def make_recipe(target: str) -> list[str]:
    lines = ROOT.joinpath("Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def pins() -> dict[str, str]:
    found = {}
    for name in ("requirements.txt", "requirements-test.txt"):
        for line in ROOT.joinpath(name).read_text().splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "-r")):
                package, sep, version = line.partition("==")
                assert sep, f"{name}: {line!r} is not pinned with =="
                found[package.lower()] = version
    return found


def test_readme_quick_start_is_exactly_make_demo_and_make_test():
    assert quick_start_commands() == ["make demo", "make test"]


def test_ci_runs_the_readme_test_command():
    ci = ROOT.joinpath(".ci", "run").read_text().splitlines()
    assert "make test" in [line.strip() for line in ci]


def test_make_targets_build_the_pinned_venv_then_run():
    makefile = ROOT.joinpath("Makefile").read_text()
    assert re.search(r"^PYTHON \?= \$\(shell command -v python3\.11 2>/dev/null \|\| echo "
                     r"python3\)$", makefile, re.M)
    assert re.search(r"^demo: venv$", makefile, re.M)
    assert re.search(r"^test: venv$", makefile, re.M)
    assert re.search(r"^PY := scripts/venv_run \$\(VENV_PYTHON\)$", makefile, re.M)
    assert make_recipe("demo") == ["$(PY) -m flashdrive_ros.demo"]
    assert make_recipe("test") == ["$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile "
                                   "--durations=25 test",
                                   "$(MAKE) --no-print-directory test-numerics"]
    install = " ".join(make_recipe("$(VENV)/.installed"))
    assert "-r requirements-test.txt" in install and "-e ." in install
    assert ROOT.joinpath("test", "test_lint.py").is_file()


def test_make_test_reruns_the_numeric_comparisons_under_other_cpu_kernels():
    assert re.search(r"^test-numerics: venv$", ROOT.joinpath("Makefile").read_text(), re.M)
    (recipe,) = make_recipe("test-numerics")
    assert recipe.startswith("MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2 $(PY) -m pytest")
    makefile = ROOT.joinpath("Makefile").read_text().replace("\\\n", " ")
    files = re.search(r"^NUMERIC_TESTS := (.*)$", makefile, re.M).group(1).split()
    assert files and all(ROOT.joinpath(f.split("::")[0]).is_file() for f in files)
    assert "test/test_engine_coc_reuse.py" in files


def test_every_requirement_is_pinned_and_the_required_ones_are_present():
    found = pins()
    assert REQUIRED_PACKAGES <= set(found), REQUIRED_PACKAGES - set(found)
    assert found["torch"] == TORCH_VERSION
    assert "-r requirements.txt" in ROOT.joinpath("requirements-test.txt").read_text()


def test_the_demo_runs_again_over_its_own_output(tmp_path, capsys):
    from flashdrive_ros.demo import main

    args = ["--out", str(tmp_path), "--seconds", "9", "--offline"]
    assert main(args) == 0
    first = json.loads((tmp_path / "replay_offline" / "report.json").read_text())
    assert main(args) == 0
    assert "replacing the previous demo replay" in capsys.readouterr().out
    second = json.loads((tmp_path / "replay_offline" / "report.json").read_text())
    assert first["windows"] == second["windows"] > 0


def test_a_demo_drive_too_short_for_a_window_exits_non_zero(tmp_path, capsys):
    from flashdrive_ros.demo import main

    assert main(["--out", str(tmp_path), "--seconds", "3", "--offline"]) == 1
    assert "flashdrive-demo: planned no window" in capsys.readouterr().err


FOREIGN_RCLPY = "raise ImportError('the rclpy of another ROS install')\n"
RCLPY_PROBE = """
import json, os, sys
import rclpy
from rclpy.utilities import get_rmw_implementation_identifier
rclpy.init()
node = rclpy.create_node("venv_run_probe")
print(json.dumps({"rclpy": rclpy.__file__, "prefix": sys.prefix,
                  "rmw": get_rmw_implementation_identifier(),
                  "ld": os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep),
                  "ament": os.environ.get("AMENT_PREFIX_PATH")}))
node.destroy_node()
rclpy.shutdown()
"""


def sourced_ros_environment(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """The environment of a shell with another ROS install sourced: its rclpy on PYTHONPATH,
    its library folder (a librcl.so the loader cannot load) on LD_LIBRARY_PATH, its prefix
    on AMENT_PREFIX_PATH, another RMW named; plus a library folder of something else."""
    prefix = tmp_path / "opt" / "ros" / "jazzy"
    site = prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" \
        / "site-packages"
    (site / "rclpy").mkdir(parents=True)
    (site / "rclpy" / "__init__.py").write_text(FOREIGN_RCLPY)
    (prefix / "lib" / "librcl.so").write_bytes(b"")
    other = tmp_path / "cuda" / "lib64"
    other.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(site), AMENT_PREFIX_PATH=str(prefix),
               COLCON_PREFIX_PATH=str(tmp_path / "ws" / "install"),
               LD_LIBRARY_PATH=os.pathsep.join([str(prefix / "lib"), str(other)]),
               RMW_IMPLEMENTATION="rmw_cyclonedds_cpp", ROS_DISTRO="jazzy",
               ROS_DOMAIN_ID=str(loopback_domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    env.pop("_ROS_WHEELS_BOOTSTRAP_COMPLETE", None)
    return env, prefix, other


def test_a_sourced_ros_install_is_left_out_of_the_venv_commands(tmp_path):
    env, prefix, other = sourced_ros_environment(tmp_path)
    plain = subprocess.run([sys.executable, "-c", RCLPY_PROBE], env=env, capture_output=True,
                           text=True, timeout=120)
    assert plain.returncode != 0 and "the rclpy of another ROS install" in plain.stderr
    for seed in range(4):
        run = subprocess.run([str(ROOT / "scripts" / "venv_run"), sys.executable, "-c",
                              RCLPY_PROBE], env=dict(env, PYTHONHASHSEED=str(seed)),
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        probe = json.loads(run.stdout.strip().splitlines()[-1])
        assert Path(probe["rclpy"]).is_relative_to(probe["prefix"])
        assert probe["rmw"] == "rmw_fastrtps_cpp"
        assert str(prefix / "lib") not in probe["ld"] and str(other) in probe["ld"]
        assert probe["ament"] is None
        assert "venv_run: a sourced ROS environment is left out" in run.stderr
        for left_out in ("PYTHONPATH", "AMENT_PREFIX_PATH", "COLCON_PREFIX_PATH",
                         f"LD_LIBRARY_PATH:{prefix / 'lib'}",
                         "RMW_IMPLEMENTATION=rmw_cyclonedds_cpp"):
            assert left_out in run.stderr, run.stderr


def test_venv_run_says_nothing_in_a_clean_environment():
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH", "COLCON_PREFIX_PATH",
                        "CMAKE_PREFIX_PATH", "LD_LIBRARY_PATH", "RMW_IMPLEMENTATION")}
    run = subprocess.run([str(ROOT / "scripts" / "venv_run"), sys.executable, "-c",
                          "import os; print(os.environ['RMW_IMPLEMENTATION'])"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.split() == ["rmw_fastrtps_cpp"]
    assert run.stderr == ""
