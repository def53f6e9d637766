import ast
import functools
import importlib.util
import sys
import types

import pytest
import yaml

from flashdrive_ros.ros import names
from flashdrive_ros.ros.params import DriveParams

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "launch" / "drive.launch.py"
RCLPY_NODE_PARAMETERS = {"use_sim_time"}
LAUNCH_ARGUMENTS = {"model_dir", "params_file", "namespace", "use_sim_time", "log_level",
                    "autostart", "foxglove", "foxglove_address", "foxglove_port"}
LAUNCH_MODULES = ("launch", "launch.actions", "launch.conditions", "launch.event_handlers",
                  "launch.events",
                  "launch.substitutions", "launch_ros", "launch_ros.actions",
                  "launch_ros.event_handlers", "launch_ros.events", "launch_ros.events.lifecycle",
                  "launch_ros.parameter_descriptions")


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


@pytest.mark.ros
def test_launch_and_yaml_parameters_are_declared_by_the_node():
    from rclpy.parameter import Parameter

    from flashdrive_ros.ros.harness.loopback import local_context
    from flashdrive_ros.ros.node import DriveNode

    tree = ast.parse(LAUNCH.read_text())
    passed = {ast.literal_eval(k) for d in ast.walk(keyword(calls(tree, "LifecycleNode")[0],
                                                            "parameters"))
              if isinstance(d, ast.Dict) for k in d.keys}
    in_yaml = set(yaml.safe_load((ROOT / "config" / "drive.yaml").read_text())[
        "/**/drive_node"]["ros__parameters"])
    context = local_context()
    node = DriveNode(context=context, parameter_overrides=[
        Parameter("model_dir", value="/nonexistent/model")])
    try:
        node.trigger_configure()
        declared = set(node.get_parameters_by_prefix(""))
    finally:
        node.destroy_node()
        context.shutdown()
    assert passed | in_yaml <= declared, (passed | in_yaml) - declared


class Recorded:
    """Stands in for a launch / launch_ros class: keeps what it was constructed with."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


@functools.cache
def recorded_class(name):
    return type(name, (Recorded,), {})


def recorded_description(monkeypatch):
    """The launch file's description, built with every launch / launch_ros name recorded."""
    for name in LAUNCH_MODULES:
        module = types.ModuleType(name)
        module.__getattr__ = recorded_class
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("drive_launch", LAUNCH)
    launch_file = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launch_file)
    return launch_file.generate_launch_description().args[0]


def resolved(value, arguments):
    kind = type(value).__name__
    if kind == "LaunchConfiguration":
        return arguments[value.args[0]]
    if kind == "ParameterValue":
        text = resolved(value.args[0], arguments)
        value_type = value.kwargs["value_type"]
        return text if value_type is str else value_type(yaml.safe_load(text))
    return value


def launched_nodes(monkeypatch, **overrides):
    """{(package, executable): resolved parameters} of the nodes the launch file starts with
    these launch arguments (the rest at their defaults)."""
    entities = recorded_description(monkeypatch)
    arguments = {e.args[0]: e.kwargs["default_value"] for e in entities
                 if type(e).__name__ == "DeclareLaunchArgument"}
    assert set(overrides) <= set(arguments)
    arguments.update(overrides)
    nodes = {}
    for entity in entities:
        if type(entity).__name__ not in ("Node", "LifecycleNode"):
            continue
        condition = entity.kwargs.get("condition")
        if condition is not None and resolved(condition.args[0], arguments).lower() not in (
                "true", "1"):
            continue
        parameters = {k: resolved(v, arguments) for p in entity.kwargs["parameters"]
                      if isinstance(p, dict) for k, v in p.items()}
        nodes[(entity.kwargs["package"], entity.kwargs["executable"])] = parameters
    return nodes


BRIDGE = ("foxglove_bridge", "foxglove_bridge")


def test_foxglove_bridge_is_off_unless_asked_for(monkeypatch):
    assert set(launched_nodes(monkeypatch)) == {("flashdrive_ros", "drive_node")}


def test_foxglove_bridge_binds_to_loopback_by_default(monkeypatch):
    nodes = launched_nodes(monkeypatch, foxglove="true", use_sim_time="true")
    assert nodes[BRIDGE] == {"address": "127.0.0.1", "port": 8765, "use_sim_time": True}
    assert nodes[("flashdrive_ros", "drive_node")]["use_sim_time"] is True


def test_foxglove_bridge_takes_the_configured_address_and_port(monkeypatch):
    nodes = launched_nodes(monkeypatch, foxglove="True", foxglove_address="0.0.0.0",
                           foxglove_port="9090")
    assert nodes[BRIDGE] == {"address": "0.0.0.0", "port": 9090, "use_sim_time": False}


def test_the_launch_shuts_down_when_drive_node_exits(monkeypatch):
    entities = recorded_description(monkeypatch)
    node = next(e for e in entities if type(e).__name__ == "LifecycleNode")
    on_exit = [e.args[0] for e in entities if type(e).__name__ == "RegisterEventHandler"
               and type(e.args[0]).__name__ == "OnProcessExit"]
    assert len(on_exit) == 1
    handler = on_exit[0]
    assert handler.kwargs["target_action"] is node
    assert "condition" not in handler.kwargs
    actions = handler.kwargs["on_exit"]
    assert [type(a).__name__ for a in actions] == ["EmitEvent"]
    assert type(actions[0].kwargs["event"]).__name__ == "Shutdown"


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
    from launch.launch_description_sources import PythonLaunchDescriptionSource
    from launch_ros.event_handlers import OnStateTransition

    import launch

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


@pytest.mark.ros
@pytest.mark.skipif(importlib.util.find_spec("launch_ros") is None,
                    reason="launch_ros is not installed (no PyPI wheel); runs on a ROS install")
def test_launch_ends_when_the_node_dies_at_start():
    import time

    from launch.launch_description_sources import PythonLaunchDescriptionSource

    import launch

    timeout_s = 60.0
    description = launch.LaunchDescription([
        launch.actions.IncludeLaunchDescription(
            PythonLaunchDescriptionSource(str(LAUNCH)),
            launch_arguments={"log_level": "not_a_level"}.items()),
        launch.actions.TimerAction(period=timeout_s, actions=[
            launch.actions.EmitEvent(event=launch.events.Shutdown(reason="timeout"))]),
    ])
    service = launch.LaunchService()
    service.include_launch_description(description)
    started = time.monotonic()
    service.run()
    assert time.monotonic() - started < timeout_s / 2
