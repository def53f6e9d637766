import ast
import importlib.util

import pytest
import yaml

from flashdrive_ros.ros import names
from flashdrive_ros.ros.params import DriveParams

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "launch" / "drive.launch.py"
RCLPY_NODE_PARAMETERS = {"use_sim_time"}
LAUNCH_ARGUMENTS = {"model_dir", "params_file", "namespace", "use_sim_time", "log_level",
                    "autostart"}


def calls(tree, name):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == name]


def keyword(call, name):
    return next(k.value for k in call.keywords if k.arg == name)


def test_launch_file_passes_only_declared_parameters():
    tree = ast.parse(LAUNCH.read_text())
    nodes = calls(tree, "LifecycleNode")
    assert len(nodes) == 1
    node = nodes[0]
    assert ast.literal_eval(keyword(node, "executable")) == "drive_node"
    assert ast.literal_eval(keyword(node, "name")) == names.NODE_NAME
    parameters = keyword(node, "parameters")
    dict_keys = [ast.literal_eval(k) for d in ast.walk(parameters) if isinstance(d, ast.Dict)
                 for k in d.keys]
    assert dict_keys, "the launch file passes no inline parameters"
    allowed = set(DriveParams.field_names()) | RCLPY_NODE_PARAMETERS
    assert set(dict_keys) <= allowed, set(dict_keys) - allowed
    declared = {ast.literal_eval(c.args[0]) for c in calls(tree, "DeclareLaunchArgument")}
    assert declared == LAUNCH_ARGUMENTS
    used = {ast.literal_eval(c.args[0]) for c in calls(tree, "LaunchConfiguration")}
    assert used == declared
    transitions = {c.attr for c in ast.walk(tree) if isinstance(c, ast.Attribute)
                   and c.attr.startswith("TRANSITION_")}
    assert transitions == {"TRANSITION_CONFIGURE", "TRANSITION_ACTIVATE"}


def test_setup_installs_the_node_script():
    assert "drive_node = flashdrive_ros.ros.node:main" in (ROOT / "setup.py").read_text()


def test_rviz_config_shows_the_node_outputs_in_base_link():
    config = yaml.safe_load((ROOT / "config" / "drive.rviz").read_text())
    manager = config["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"] == DriveParams().base_frame
    displays = {d["Class"]: d for d in manager["Displays"]}
    topic = {cls: displays[cls]["Topic"]["Value"] for cls in (
        "rviz_default_plugins/Path", "rviz_default_plugins/MarkerArray",
        "rviz_default_plugins/Image")}
    assert topic == {
        "rviz_default_plugins/Path": names.resolved(names.TRAJECTORY_TOPIC),
        "rviz_default_plugins/MarkerArray": names.resolved(names.SAMPLES_TOPIC),
        "rviz_default_plugins/Image": names.resolved(names.OVERLAY_TOPIC),
    }


@pytest.mark.ros
@pytest.mark.skipif(importlib.util.find_spec("launch_ros") is None,
                    reason="launch_ros is not installed (no PyPI wheel); runs on a ROS install")
def test_launch_starts_and_activates_the_node():
    import launch
    from launch.launch_description_sources import PythonLaunchDescriptionSource
    from launch_ros.event_handlers import OnStateTransition

    reached = []

    def on_active(context):
        reached.append("active")
        return [launch.actions.EmitEvent(event=launch.events.Shutdown(reason="active"))]

    description = launch.LaunchDescription([
        launch.actions.IncludeLaunchDescription(PythonLaunchDescriptionSource(str(LAUNCH))),
        launch.actions.RegisterEventHandler(OnStateTransition(
            goal_state="active", entities=[launch.actions.OpaqueFunction(function=on_active)])),
        launch.actions.TimerAction(period=120.0, actions=[
            launch.actions.EmitEvent(event=launch.events.Shutdown(reason="timeout"))]),
    ])
    service = launch.LaunchService()
    service.include_launch_description(description)
    service.run()
    assert reached == ["active"]
