"""The package's layers import only downward (shared DESIGN.md), checked on every module's
imports (lazy ones inside functions included) with ast."""

import ast
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "flashdrive_ros"

TOOLS = ("eval", "reliability", "bench", "train", "closed_loop", "demo", "export_cli")
RANKS = {**dict.fromkeys(TOOLS, 6), "ros": 5, "engine": 4, "backends": 3,
         "default_names": 2, "model": 1, "paths": 0, "settings": 0}
SIM_USES = {"sim", "model", "default_names", "paths", "settings"}
ROS_ONLY_IN = {"ros"}


def unit_of(module: str) -> str:
    """The layer unit of `flashdrive_ros.a.b`: its folder or top-level module ("a")."""
    return module.split(".")[1] if "." in module else ""


def is_ros_module(name: str) -> bool:
    top = name.split(".")[0]
    return top in ("rclpy", "rcl_interfaces") or top.endswith("_msgs")


def imported_names(tree: ast.AST, package: str) -> set[str]:
    """Every module an import statement names (`from pkg import sub` names pkg.sub too)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == package:
                names |= {f"{package}.{alias.name}" for alias in node.names}
    return names


def layer_problems(package_dir: Path) -> list[str]:
    """Imports that break the order of the layers, one line each."""
    package = package_dir.name
    problems = []
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(package_dir)
        unit = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        if unit == "__init__":
            continue
        for name in sorted(imported_names(ast.parse(path.read_text()), package)):
            where = f"{package}/{rel.as_posix()} imports {name}"
            if is_ros_module(name) and unit not in ROS_ONLY_IN:
                problems.append(f"{where}: rclpy / *_msgs only in {sorted(ROS_ONLY_IN)}")
            if not name.startswith(package + "."):
                continue
            target = unit_of(name)
            if target == unit:
                continue
            if unit == "sim":
                if target not in SIM_USES:
                    problems.append(f"{where}: sim/ uses only {sorted(SIM_USES - {'sim'})}")
            elif target == "sim":
                if RANKS.get(unit) != RANKS["eval"]:
                    problems.append(f"{where}: sim/ is for tools and tests only")
            elif unit not in RANKS or target not in RANKS:
                problems.append(f"{where}: {unit if unit not in RANKS else target} has no "
                                f"layer")
            elif RANKS[target] > RANKS[unit]:
                problems.append(f"{where}: {target} is a layer above {unit}")
    return problems


def unit_graph(package_dir: Path) -> dict[str, set[str]]:
    package = package_dir.name
    graph: dict[str, set[str]] = {}
    for path in package_dir.rglob("*.py"):
        rel = path.relative_to(package_dir)
        unit = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        targets = {unit_of(n) for n in imported_names(ast.parse(path.read_text()), package)
                   if n.startswith(package + ".")}
        graph.setdefault(unit, set()).update(targets - {unit})
    return graph


def unit_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles between folders (each as a path that returns to its start)."""
    cycles, done = [], set()

    def visit(unit: str, trail: list[str]) -> None:
        if unit in trail:
            cycles.append(trail[trail.index(unit):] + [unit])
            return
        if unit in done:
            return
        for target in sorted(graph.get(unit, ())):
            visit(target, trail + [unit])
        done.add(unit)

    for unit in sorted(graph):
        visit(unit, [])
    return cycles


def test_the_package_imports_only_downward():
    assert layer_problems(PACKAGE_DIR) == []


def test_no_import_cycle_between_folders():
    assert unit_cycles(unit_graph(PACKAGE_DIR)) == []


def test_every_folder_has_a_layer():
    units = {p.name for p in PACKAGE_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"}
    units |= {p.stem for p in PACKAGE_DIR.glob("*.py") if p.stem != "__init__"}
    assert units - set(RANKS) == {"sim"}


def _write(root: Path, files: dict[str, str]) -> Path:
    package = root / "flashdrive_ros"
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


@pytest.mark.parametrize("rel, text, reason", [
    ("engine/step.py", "def f():\n    from flashdrive_ros.ros.node import main\n",
     "ros is a layer above engine"),
    ("model/vision.py", "from flashdrive_ros import engine\n", "engine is a layer above model"),
    ("ros/params.py", "from flashdrive_ros.sim import topics\n", "for tools and tests only"),
    ("sim/world.py", "import flashdrive_ros.engine.config\n", "sim/ uses only"),
    ("engine/clock.py", "from rclpy.clock import Clock\n", "rclpy / *_msgs only"),
    ("eval/plot.py", "from nav_msgs.msg import Path\n", "rclpy / *_msgs only"),
    ("gui/app.py", "import flashdrive_ros.ros.node\n", "gui has no layer"),
])
def test_the_checker_finds_a_planted_upward_import(tmp_path, rel, text, reason):
    clean = {"ros/node.py": "from rclpy.node import Node\nimport flashdrive_ros.engine.config\n",
             "engine/config.py": "from flashdrive_ros.model import config\n",
             "ros/harness/session.py": "import rclpy\nfrom flashdrive_ros.ros import node\n",
             "eval/replay.py": "from flashdrive_ros.sim.topics import CAMERA_NAMES\n",
             "sim/topics.py": "from flashdrive_ros.default_names import CAMERA_NAMES\n",
             "model/config.py": "", "default_names.py": "import flashdrive_ros.model.config\n"}
    assert layer_problems(_write(tmp_path / "clean", clean)) == []
    problems = layer_problems(_write(tmp_path / "planted", {**clean, rel: text}))
    assert len(problems) == 1 and reason in problems[0] and rel in problems[0]


def test_the_checker_finds_a_folder_cycle(tmp_path):
    package = _write(tmp_path, {"eval/a.py": "from flashdrive_ros.train import b\n",
                                "train/b.py": "def f():\n    import flashdrive_ros.eval.a\n",
                                "bench/c.py": "import flashdrive_ros.eval.a\n"})
    assert layer_problems(package) == []
    assert unit_cycles(unit_graph(package)) == [["eval", "train", "eval"]]
