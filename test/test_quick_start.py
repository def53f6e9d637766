"""The README quick start: two make commands over a pinned virtualenv, and CI runs the second."""

import json
import re
from pathlib import Path

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
    assert make_recipe("demo") == ["$(PY) -m flashdrive_ros.demo"]
    assert make_recipe("test") == ["$(PY) -m pytest -q test",
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
