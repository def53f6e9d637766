"""Starts drive_node as a lifecycle node with config/drive.yaml; with autostart:=true it is
configured and then activated through lifecycle events. When drive_node exits (a failed
start included) the launch shuts down. With foxglove:=true it also starts
foxglove_bridge (package foxglove_bridge), bound to foxglove_address (127.0.0.1 unless set).

ros2 launch flashdrive_ros drive.launch.py model_dir:=/path/to/model use_sim_time:=true
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown, matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from lifecycle_msgs.msg import Transition

from flashdrive_ros.paths import config_file


def generate_launch_description() -> LaunchDescription:
    autostart = LaunchConfiguration("autostart")
    arguments = [
        DeclareLaunchArgument("model_dir", default_value="",
                              description="Model directory; empty = the embedded model."),
        DeclareLaunchArgument("params_file", default_value=str(config_file("drive.yaml")),
                              description="Parameter file for drive_node."),
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of drive_node."),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Use /clock (e.g. rosbag replay with --clock)."),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="debug, info, warn, error or fatal."),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="Configure and activate drive_node on start."),
        DeclareLaunchArgument("foxglove", default_value="false",
                              description="Also start foxglove_bridge (WebSocket for Foxglove)."),
        DeclareLaunchArgument("foxglove_address", default_value="127.0.0.1",
                              description="Address foxglove_bridge binds to; 0.0.0.0 opens it "
                                          "to every network the machine is on."),
        DeclareLaunchArgument("foxglove_port", default_value="8765",
                              description="WebSocket port of foxglove_bridge."),
    ]
    use_sim_time = ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)
    node = LifecycleNode(
        package="flashdrive_ros",
        executable="drive_node",
        name="drive_node",
        namespace=LaunchConfiguration("namespace"),
        output="screen",
        parameters=[
            LaunchConfiguration("params_file"),
            {
                "model_dir": ParameterValue(LaunchConfiguration("model_dir"), value_type=str),
                "use_sim_time": use_sim_time,
            },
        ],
        arguments=["--ros-args", "--log-level", LaunchConfiguration("log_level")],
    )
    configure = EmitEvent(
        event=ChangeState(lifecycle_node_matcher=matches_action(node),
                          transition_id=Transition.TRANSITION_CONFIGURE),
        condition=IfCondition(autostart),
    )
    activate_when_configured = RegisterEventHandler(
        OnStateTransition(
            target_lifecycle_node=node,
            start_state="configuring",
            goal_state="inactive",
            entities=[EmitEvent(event=ChangeState(
                lifecycle_node_matcher=matches_action(node),
                transition_id=Transition.TRANSITION_ACTIVATE))],
        ),
        condition=IfCondition(autostart),
    )
    shutdown_when_node_exits = RegisterEventHandler(OnProcessExit(
        target_action=node,
        on_exit=[EmitEvent(event=Shutdown(reason="drive_node exited"))]))
    foxglove_bridge = Node(
        package="foxglove_bridge",
        executable="foxglove_bridge",
        name="foxglove_bridge",
        output="screen",
        parameters=[{
            "address": ParameterValue(LaunchConfiguration("foxglove_address"), value_type=str),
            "port": ParameterValue(LaunchConfiguration("foxglove_port"), value_type=int),
            "use_sim_time": use_sim_time,
        }],
        condition=IfCondition(LaunchConfiguration("foxglove")),
    )
    return LaunchDescription([*arguments, node, shutdown_when_node_exits,
                              activate_when_configured, configure, foxglove_bridge])
