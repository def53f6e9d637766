"""The ament_python package: package.xml, what setup.py installs, console scripts."""

import ast
import configparser
import runpy
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import setuptools
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "flashdrive_ros"
SHARE = f"share/{PACKAGE}"
REQUIRED_EXEC_DEPENDS = {"rclpy", "sensor_msgs", "nav_msgs", "geometry_msgs", "std_msgs",
                         "visualization_msgs", "diagnostic_msgs", "launch_ros"}
DESIGN_CONSOLE_SCRIPTS = {"drive_node", "flashdrive-sim", "flashdrive-replay",
                          "flashdrive-bench", "flashdrive-export"}
ROS_PYTHON_PACKAGES = {"rclpy", "launch", "launch_ros", "ament_index_python"}
INSTALLED_FOLDERS = ("launch", "config", "models")
# imported Python library -> the rosdep key of package.xml that installs it
PYTHON_LIBRARY_KEYS = {"numpy": "python3-numpy", "yaml": "python3-yaml", "cv2": "python3-opencv",
                       "torch": "python3-torch", "tqdm": "python3-tqdm",
                       "matplotlib": "python3-matplotlib",
                       "safetensors": "python3-safetensors-pip",
                       "tokenizers": "python3-tokenizers-pip", "onnx": "python3-onnx-pip",
                       "onnxruntime": "python3-onnxruntime-pip",
                       "rosbags": "python3-rosbags-pip", "av": "python3-av-pip"}
# imported only where asked for, installed outside rosdep: TensorRT with JetPack,
# transformers for the Hugging Face reference of flashdrive-bench
OPTIONAL_LIBRARIES = {"tensorrt", "transformers"}
# pip keys that rosdistro's rosdep/python.yaml defines; the others are in ROSDEP_FILE
ROSDISTRO_PIP_KEYS = {"python3-onnxruntime-pip", "python3-rosbags-pip"}
ROSDEP_FILE = ROOT / "rosdep" / f"{PACKAGE}.yaml"


@pytest.fixture(scope="module")
def manifest() -> ET.Element:
    return ET.parse(ROOT / "package.xml").getroot()


@pytest.fixture(scope="module")
def setup_kwargs() -> dict:
    captured: dict = {}
    patch = pytest.MonkeyPatch()
    patch.chdir(ROOT)
    patch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    try:
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    finally:
        patch.undo()
    return captured


def exec_depends(manifest: ET.Element) -> set[str]:
    return {e.text.strip() for e in manifest.findall("exec_depend")}


def installed_files(setup_kwargs: dict) -> set[str]:
    """'share/.../name' for every file the data_files entries install."""
    return {f"{dest}/{Path(src).name}" for dest, sources in setup_kwargs["data_files"]
            for src in sources}


def imported_top_level_modules(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def is_ros_package(module: str) -> bool:
    return module in ROS_PYTHON_PACKAGES or module.endswith(("_msgs", "_interfaces"))


def test_package_xml_is_format_3_ament_python(manifest):
    assert manifest.tag == "package" and manifest.get("format") == "3"
    assert manifest.findtext("name") == PACKAGE
    assert manifest.findtext("export/build_type") == "ament_python"
    assert REQUIRED_EXEC_DEPENDS <= exec_depends(manifest)


def test_every_imported_ros_package_is_an_exec_depend(manifest):
    imported = (imported_top_level_modules(ROOT / PACKAGE)
                | imported_top_level_modules(ROOT / "launch"))
    ros_imports = {m for m in imported if is_ros_package(m)}
    assert {"rclpy", "launch_ros"} <= ros_imports
    assert ros_imports <= exec_depends(manifest), ros_imports - exec_depends(manifest)


def test_every_imported_python_library_is_an_exec_depend(manifest):
    imported = (imported_top_level_modules(ROOT / PACKAGE)
                | imported_top_level_modules(ROOT / "launch"))
    libraries = {m for m in imported if m not in sys.stdlib_module_names
                 and not is_ros_package(m) and m != PACKAGE}
    assert libraries - OPTIONAL_LIBRARIES == set(PYTHON_LIBRARY_KEYS)
    assert set(PYTHON_LIBRARY_KEYS.values()) <= exec_depends(manifest)


def test_pip_keys_are_defined_for_rosdep_and_pinned_in_requirements(manifest):
    pip_keys = {k for k in exec_depends(manifest) if k.endswith("-pip")}
    defined = yaml.safe_load(ROSDEP_FILE.read_text())
    assert pip_keys - ROSDISTRO_PIP_KEYS == set(defined)
    pinned = {line.split("==")[0] for line in (ROOT / "requirements.txt").read_text().split()}
    for key, platforms in defined.items():
        packages = {p for platform in ("ubuntu", "debian")
                    for p in platforms[platform]["pip"]["packages"]}
        assert packages == {key.removeprefix("python3-").removesuffix("-pip")}, key
        assert packages <= pinned, key


def test_installed_scripts_take_python3_from_the_environment():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["build_scripts"]["executable"] == "/usr/bin/env python3"


def test_setup_matches_package_xml(manifest, setup_kwargs):
    assert setup_kwargs["name"] == PACKAGE
    assert setup_kwargs["version"] == manifest.findtext("version")
    assert setup_kwargs["python_requires"] == ">=3.10"


def test_resource_marker_and_package_xml_are_installed(setup_kwargs):
    files = installed_files(setup_kwargs)
    assert f"share/ament_index/resource_index/packages/{PACKAGE}" in files
    assert f"{SHARE}/package.xml" in files
    assert (ROOT / "resource" / PACKAGE).is_file()


@pytest.mark.parametrize("folder", INSTALLED_FOLDERS)
def test_every_data_file_is_installed_under_share(setup_kwargs, folder):
    on_disk = {f"{SHARE}/{p.relative_to(ROOT).as_posix()}"
               for p in (ROOT / folder).rglob("*") if p.is_file()
               and "__pycache__" not in p.parts}
    assert on_disk, f"{folder}/ is empty"
    assert on_disk <= installed_files(setup_kwargs), on_disk - installed_files(setup_kwargs)


def test_data_file_sources_exist(setup_kwargs):
    for _, sources in setup_kwargs["data_files"]:
        for src in sources:
            assert (ROOT / src).is_file(), src


def test_every_python_folder_is_an_installed_package(setup_kwargs):
    folders = {p.parent.relative_to(ROOT).as_posix().replace("/", ".")
               for p in (ROOT / PACKAGE).rglob("*.py")}
    assert folders <= set(setup_kwargs["packages"]), folders - set(setup_kwargs["packages"])
    assert not any(p.split(".")[0] == "test" for p in setup_kwargs["packages"])


def test_console_scripts_name_existing_main_functions(setup_kwargs):
    scripts = dict(entry.replace(" ", "").split("=")
                   for entry in setup_kwargs["entry_points"]["console_scripts"])
    assert DESIGN_CONSOLE_SCRIPTS <= set(scripts)
    for name, target in scripts.items():
        module, function = target.split(":")
        path = ROOT / (module.replace(".", "/") + ".py")
        assert path.is_file(), (name, target)
        defined = {n.name for n in ast.parse(path.read_text()).body
                   if isinstance(n, ast.FunctionDef)}
        assert function in defined, (name, target)


def test_scripts_install_where_ros2_run_looks():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["develop"]["script_dir"] == f"$base/lib/{PACKAGE}"
    assert cfg["install"]["install_scripts"] == f"$base/lib/{PACKAGE}"
