"""`drive_node --ros-args --params-file FILE` as a real process, driven through its lifecycle
services over DDS."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rcl_interfaces.srv import GetParameters
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from test_ros_fixtures import make_tiny_model_dir

from flashdrive_ros.ros.loopback import local_context, process_domain_id

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]
CONSOLE_SCRIPT = Path(sys.executable).with_name("drive_node")
NAMESPACE = "/main_test"
WAIT_S = 60.0


def call(executor, client, request):
    assert client.wait_for_service(timeout_sec=WAIT_S), f"{client.srv_name} not available"
    future = client.call_async(request)
    executor.spin_until_future_complete(future, timeout_sec=WAIT_S)
    assert future.done(), f"{client.srv_name} did not answer"
    return future.result()


@pytest.fixture()
def context():
    context = local_context()
    yield context
    context.shutdown()


@pytest.mark.parametrize("command", [
    [str(CONSOLE_SCRIPT)],
    [sys.executable, "-m", "flashdrive_ros.ros.node"],
], ids=["console_script", "module"])
def test_main_reads_params_file_and_runs_the_lifecycle(command, context, tmp_path):
    if command[0] == str(CONSOLE_SCRIPT) and not CONSOLE_SCRIPT.is_file():
        pytest.skip("drive_node console script not installed (pip install -e .)")
    model_dir = make_tiny_model_dir(tmp_path / "model")
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump({"/**/drive_node": {"ros__parameters": {
        "model_dir": str(model_dir), "device": "cpu", "control_rate_hz": 5.0,
        "speculative": False}}}))
    env = dict(os.environ, ROS_DOMAIN_ID=str(process_domain_id()), OMP_NUM_THREADS="1",
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    log = (tmp_path / "node.log").open("w")
    process = subprocess.Popen([*command, "--ros-args", "--params-file", str(params_file),
                                "-r", f"__ns:={NAMESPACE}"], stdout=log,
                               stderr=subprocess.STDOUT, env=env)
    node = Node("main_test_client", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    base = f"{NAMESPACE}/drive_node"
    try:
        get_state = node.create_client(GetState, f"{base}/get_state")
        change = node.create_client(ChangeState, f"{base}/change_state")
        state = call(executor, get_state, GetState.Request()).current_state.id
        assert state == State.PRIMARY_STATE_UNCONFIGURED
        for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            request = ChangeState.Request(transition=Transition(id=transition))
            result = call(executor, change, request)
            assert result.success, (tmp_path / "node.log").read_text()
        state = call(executor, get_state, GetState.Request()).current_state.id
        assert state == State.PRIMARY_STATE_ACTIVE
        params = node.create_client(GetParameters, f"{base}/get_parameters")
        values = call(executor, params, GetParameters.Request(
            names=["control_rate_hz", "speculative", "mode"])).values
        assert (values[0].double_value, values[1].bool_value, values[2].string_value) == \
            (5.0, False, "flashdrive")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0, (tmp_path / "node.log").read_text()
    finally:
        executor.shutdown()
        node.destroy_node()
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


def test_autostart_activates_and_a_bad_model_exits_with_an_error(context, tmp_path):
    model_dir = make_tiny_model_dir(tmp_path / "model")
    env = dict(os.environ, ROS_DOMAIN_ID=str(process_domain_id()), OMP_NUM_THREADS="1",
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    command = [sys.executable, "-m", "flashdrive_ros.ros.node", "--autostart", "--ros-args",
               "-r", f"__ns:={NAMESPACE}", "-p", "device:=cpu", "-p", "speculative:=false"]
    bad = subprocess.run([*command, "-p", f"model_dir:={tmp_path}"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert "configure failed" in bad.stderr + bad.stdout
    log = (tmp_path / "node.log").open("w")
    process = subprocess.Popen([*command, "-p", f"model_dir:={model_dir}"], stdout=log,
                               stderr=subprocess.STDOUT, env=env)
    node = Node("autostart_client", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        get_state = node.create_client(GetState, f"{NAMESPACE}/drive_node/get_state")
        state = call(executor, get_state, GetState.Request()).current_state.id
        deadline = time.monotonic() + WAIT_S
        while state != State.PRIMARY_STATE_ACTIVE and time.monotonic() < deadline:
            time.sleep(0.1)
            state = call(executor, get_state, GetState.Request()).current_state.id
        assert state == State.PRIMARY_STATE_ACTIVE, (tmp_path / "node.log").read_text()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        executor.shutdown()
        node.destroy_node()
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
