from glob import glob
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.develop import develop

PACKAGE = "flashdrive_ros"


class DevelopWithScriptHeader(develop):
    """`setup.py develop` (colcon build --symlink-install) writes the console scripts with
    the interpreter of setup.cfg's [build_scripts] executable, as an install does, instead
    of the Python that builds (setuptools < 80, as colcon-core requires)."""

    def install_wrapper_scripts(self, dist) -> None:
        from setuptools.command.develop import VersionlessRequirement
        from setuptools.command.easy_install import ScriptWriter

        executable = self.get_finalized_command("build_scripts").executable
        header = ScriptWriter.get_header("", executable)
        for args in ScriptWriter.best().get_args(VersionlessRequirement(dist), header):
            self.write_script(*args)


def tree(folder: str) -> list[tuple[str, list[str]]]:
    """data_files entries installing `folder` recursively under share/flashdrive_ros."""
    entries: dict[str, list[str]] = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            dest = str(Path("share", PACKAGE, path.parent))
            entries.setdefault(dest, []).append(str(path))
    return sorted(entries.items())


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.rviz")
         + glob("config/*.xml")),
        *tree("models"),
    ],
    install_requires=["setuptools"],
    cmdclass={"develop": DevelopWithScriptHeader},
    zip_safe=True,
    maintainer="flashdrive_ros maintainers",
    maintainer_email="flashdrive@example.com",
    description="Real-time reasoning VLA driving node with the FlashDrive shortcuts.",
    license="Apache-2.0",
    python_requires=">=3.10",
    entry_points={
        "console_scripts": [
            "drive_node = flashdrive_ros.ros.node:main",
            "flashdrive-export = flashdrive_ros.export_cli:main",
            "flashdrive-faults = flashdrive_ros.reliability.fault_cli:main",
            "flashdrive-bench = flashdrive_ros.bench.cli:main",
            "flashdrive-drive = flashdrive_ros.closed_loop.cli:main",
            "flashdrive-replay = flashdrive_ros.eval.cli:main",
            "flashdrive-sim = flashdrive_ros.sim.cli:main",
            "flashdrive-topics = flashdrive_ros.eval.topics_cli:main",
            "flashdrive-soak = flashdrive_ros.reliability.soak_cli:main",
            "flashdrive-train = flashdrive_ros.train.pipeline:main",
        ],
    },
)
