"""`drive_node --ros-args --params-file FILE` as a real process, driven through its lifecycle
services over DDS."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import rclpy
import yaml
from helpers.tiny_model import make_tiny_model_dir
from lifecycle_msgs.msg import Transition
from rcl_interfaces.srv import GetParameters

from flashdrive_ros.ros.harness.lifecycle_client import LifecycleClient, LifecycleError
from flashdrive_ros.ros.harness.loopback import loopback_domain_id
from flashdrive_ros.ros.node import spin_until_shutdown

pytestmark = [pytest.mark.ros, pytest.mark.timeout(180)]
CONSOLE_SCRIPT = Path(sys.executable).with_name("drive_node")
NAMESPACE = "/main_test"
BASE = f"{NAMESPACE}/drive_node"
WAIT_S = 60.0


def call(client, request):
    assert client.wait_for_service(timeout_sec=WAIT_S), f"{client.srv_name} not available"
    future = client.call_async(request)
    deadline = time.monotonic() + WAIT_S
    while not future.done() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert future.done(), f"{client.srv_name} did not answer"
    return future.result()


def drive_lifecycle(lifecycle, transitions, log_path):
    try:
        for transition in transitions:
            lifecycle.transition(transition, WAIT_S)
    except LifecycleError as exc:
        pytest.fail(f"{exc}; node log:\n{log_path.read_text()}")


def stop(process):
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.mark.parametrize("command", [
    [str(CONSOLE_SCRIPT)],
    [sys.executable, "-m", "flashdrive_ros.ros.node"],
], ids=["console_script", "module"])
def test_main_reads_params_file_and_runs_the_lifecycle(command, client_node, tmp_path):
    if command[0] == str(CONSOLE_SCRIPT) and not CONSOLE_SCRIPT.is_file():
        pytest.skip("drive_node console script not installed (pip install -e .)")
    model_dir = make_tiny_model_dir(tmp_path / "model")
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump({"/**/drive_node": {"ros__parameters": {
        "model_dir": str(model_dir), "device": "cpu", "control_rate_hz": 5.0,
        "speculative": False}}}))
    env = dict(os.environ, ROS_DOMAIN_ID=str(loopback_domain_id()), OMP_NUM_THREADS="1",
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    log_path = tmp_path / "node.log"
    with log_path.open("w") as log:
        process = subprocess.Popen([*command, "--ros-args", "--params-file", str(params_file),
                                    "-r", f"__ns:={NAMESPACE}"], stdout=log,
                                   stderr=subprocess.STDOUT, env=env)
    try:
        lifecycle = LifecycleClient(client_node, BASE, alive=lambda: process.poll() is None)
        assert lifecycle.state(WAIT_S) == "unconfigured"
        drive_lifecycle(lifecycle, (Transition.TRANSITION_CONFIGURE,
                                    Transition.TRANSITION_ACTIVATE), log_path)
        assert lifecycle.state(WAIT_S) == "active"
        params = client_node.create_client(GetParameters, f"{BASE}/get_parameters")
        values = call(params, GetParameters.Request(
            names=["control_rate_hz", "speculative", "mode"])).values
        assert (values[0].double_value, values[1].bool_value, values[2].string_value) == \
            (5.0, False, "flashdrive")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0, log_path.read_text()
    finally:
        stop(process)


def test_autostart_activates_and_a_bad_model_exits_with_an_error(client_node, tmp_path):
    model_dir = make_tiny_model_dir(tmp_path / "model")
    env = dict(os.environ, ROS_DOMAIN_ID=str(loopback_domain_id()), OMP_NUM_THREADS="1",
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    command = [sys.executable, "-m", "flashdrive_ros.ros.node", "--autostart", "--ros-args",
               "-r", f"__ns:={NAMESPACE}", "-p", "device:=cpu", "-p", "speculative:=false"]
    bad = subprocess.run([*command, "-p", f"model_dir:={tmp_path}"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert "configure failed" in bad.stderr + bad.stdout
    log_path = tmp_path / "node.log"
    with log_path.open("w") as log:
        process = subprocess.Popen([*command, "-p", f"model_dir:={model_dir}"], stdout=log,
                                   stderr=subprocess.STDOUT, env=env)
    try:
        lifecycle = LifecycleClient(client_node, BASE, alive=lambda: process.poll() is None)
        state = lifecycle.state(WAIT_S)
        deadline = time.monotonic() + WAIT_S
        while state != "active" and time.monotonic() < deadline:
            time.sleep(0.1)
            state = lifecycle.state(WAIT_S)
        assert state == "active", log_path.read_text()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0
    finally:
        stop(process)


class _SpinThat:
    """An executor whose spin does what the test says (the signal-handler race of a real
    executor cannot be timed from a test)."""

    def __init__(self, spin):
        self.spin = spin


def test_a_shutdown_that_breaks_spin_is_a_clean_exit_and_other_errors_are_raised():
    context = rclpy.Context()
    context.init()

    def interrupted():
        context.try_shutdown()
        raise RuntimeError("failed to initialize wait set: the given context is not valid")

    spin_until_shutdown(_SpinThat(interrupted), context)
    live = rclpy.Context()
    live.init()
    try:
        def broken():
            raise RuntimeError("a callback failed")

        with pytest.raises(RuntimeError, match="a callback failed"):
            spin_until_shutdown(_SpinThat(broken), live)
    finally:
        live.try_shutdown()
