import dataclasses

import pytest
import yaml
from rcl_interfaces.msg import ParameterType
from rclpy.exceptions import InvalidParameterValueException
from rclpy.node import Node
from rclpy.parameter import Parameter

from flashdrive_ros.ros.harness.loopback import local_context
from flashdrive_ros.ros.params import (
    DriveParams,
    ParameterError,
    add_validation_callback,
    declare_parameters,
    descriptor_for,
    read_parameters,
)
from flashdrive_ros.sim import topics
from flashdrive_ros.sim.cameras import sim_mount

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def context():
    context = local_context()
    yield context
    context.shutdown()


def test_defaults_follow_sim_topics():
    params = DriveParams()
    assert params.camera_names == list(topics.CAMERA_NAMES)
    assert params.camera_topics[1] == topics.camera_image_topic(topics.CAMERA_NAMES[1])
    assert params.odom_topic == topics.ODOMETRY_TOPIC
    assert params.control_rate_hz == 10.0 and params.mode == "flashdrive"
    assert params.overlay_camera in params.camera_names
    assert params.overlay_extrinsic == list(sim_mount(params.overlay_camera))


@pytest.mark.parametrize("changes, match", [
    (dict(camera_names=["a", "b"]), "camera_topics has 4 entries"),
    (dict(camera_names=["a", "a", "b", "c"]), "duplicates"),
    (dict(control_rate_hz=0.0), "below"),
    (dict(control_rate_hz=float("nan")), "finite"),
    (dict(sync_queue_size=True), "must be int"),
    (dict(mode="fast"), "one of"),
    (dict(image_transport="raw"), "compressed"),
    (dict(overlay_camera="camera_rear"), "not in camera_names"),
    (dict(overlay_intrinsics=[0.0, 500.0, 1.0, 1.0]), "fx and fy"),
    (dict(overlay_extrinsic=[0.0] * 5), "6 values"),
    (dict(device="gpu"), "device"),
    (dict(model_dir="/nonexistent/model"), "not a directory"),
    (dict(camera_topics=["/a", "", "/c", "/d"]), "empty string"),
])
def test_invalid_values_raise_with_reason(changes, match):
    with pytest.raises(ParameterError, match=match):
        DriveParams().replace(**changes)


def test_yaml_defaults_match_the_dataclass():
    loaded = yaml.safe_load((ROOT / "config" / "drive.yaml").read_text())
    values = loaded["/**/drive_node"]["ros__parameters"]
    assert set(values) == set(DriveParams.field_names())
    assert DriveParams(**values) == DriveParams()


def test_descriptors_carry_ranges_and_read_only():
    fields = {f.name: f for f in dataclasses.fields(DriveParams)}
    rate = descriptor_for(fields["control_rate_hz"])
    assert rate.type == ParameterType.PARAMETER_DOUBLE
    assert (rate.floating_point_range[0].from_value, rate.floating_point_range[0].to_value) == \
        (0.5, 100.0)
    assert descriptor_for(fields["camera_topics"]).read_only
    assert descriptor_for(fields["sync_queue_size"]).integer_range[0].to_value == 100
    assert "baseline" in descriptor_for(fields["mode"]).additional_constraints
    assert descriptor_for(fields["overlay_intrinsics"]).type == \
        ParameterType.PARAMETER_DOUBLE_ARRAY


def test_declare_read_and_reject_on_a_real_node(context, tmp_path):
    params_file = tmp_path / "p.yaml"
    params_file.write_text(yaml.safe_dump({"param_test_node": {"ros__parameters": {
        "control_rate_hz": 20.0, "mode": "baseline", "camera_names": ["a", "b"],
        "camera_topics": ["/a", "/b"], "camera_info_topics": ["/a/info", "/b/info"],
        "overlay_camera": "b"}}}))
    node = Node("param_test_node", context=context,
                cli_args=["--ros-args", "--params-file", str(params_file)])
    try:
        declare_parameters(node)
        declare_parameters(node)
        params = read_parameters(node)
        assert params.control_rate_hz == 20.0 and params.mode == "baseline"
        assert params.camera_names == ["a", "b"] and params.overlay_camera == "b"
        assert params.overlay_intrinsics == [0.0, 0.0, 0.0, 0.0]
        accepted = []
        add_validation_callback(node, accepted.append)

        result = node.set_parameters([Parameter("max_plan_age_s", value=1.5)])[0]
        assert result.successful
        assert read_parameters(node).max_plan_age_s == 1.5

        result = node.set_parameters([Parameter("overlay_camera", value="zzz")])[0]
        assert not result.successful and "not in camera_names" in result.reason
        result = node.set_parameters([Parameter("control_rate_hz", value=500.0)])[0]
        assert not result.successful
        result = node.set_parameters([Parameter("model_dir", value="/tmp")])[0]
        assert not result.successful and "read-only" in result.reason
        result = node.set_parameters([Parameter("mode", value="turbo")])[0]
        assert not result.successful and "one of" in result.reason
        assert read_parameters(node).control_rate_hz == 20.0
        assert len(accepted) == 1 and accepted[0].max_plan_age_s == 1.5
    finally:
        node.destroy_node()


def test_out_of_range_override_fails_declaration(context):
    node = Node("param_range_node", context=context,
                cli_args=["--ros-args", "-p", "sync_queue_size:=1000"])
    try:
        with pytest.raises(InvalidParameterValueException):
            declare_parameters(node)
    finally:
        node.destroy_node()


def test_cpu_threads_default_leaves_a_core_to_the_callbacks():
    from flashdrive_ros.ros.node import cpu_thread_count

    assert cpu_thread_count(0, 2) == 1
    assert cpu_thread_count(0, 16) == 15
    assert cpu_thread_count(0, 1) == 1
    assert cpu_thread_count(0, None) == 1
    assert cpu_thread_count(3, 2) == 3
    with pytest.raises(ParameterError, match="cpu_threads"):
        DriveParams(cpu_threads=-1)


def test_engine_config_uses_cuda_graphs_with_the_torch_backend_only():
    from flashdrive_ros.ros.node import engine_config

    assert engine_config(DriveParams(dtype="float32"), "cuda").cuda_graphs is True
    trt = engine_config(DriveParams(backend="tensorrt", dtype="float32"), "cuda")
    assert trt.backend == "tensorrt" and trt.cuda_graphs is False
    assert trt.rotated_keys is False and trt.streaming and trt.speculative
    assert engine_config(DriveParams(dtype="float32"), "cpu").cuda_graphs is False
    base = engine_config(DriveParams(mode="baseline", backend="tensorrt", dtype="float32"),
                         "cuda")
    assert base.backend == "tensorrt" and not base.cuda_graphs


def test_every_engine_switch_is_a_node_parameter():
    from flashdrive_ros.engine.config import SHORTCUTS, EngineConfig
    from flashdrive_ros.ros.node import engine_config

    switches = {f.name for f in dataclasses.fields(EngineConfig) if "bool" in str(f.type)}
    assert switches == {*SHORTCUTS, "rotated_keys", "padded_logits", "coc_reuse", "staged_prefix",
                        "compiled_expert", "compiled_backbone", "forward_only"}
    assert switches <= set(DriveParams.field_names())
    opt_in = {"compiled_expert", "compiled_backbone"}
    assert not any(getattr(DriveParams(), name) for name in opt_in)
    for name in opt_in:
        compiled = DriveParams(dtype="float32").replace(**{name: True})
        assert getattr(engine_config(compiled, "cuda"), name)
        assert not getattr(engine_config(compiled, "cpu"), name)
        assert not getattr(engine_config(compiled.replace(cuda_graphs=False), "cuda"), name)
    on_cuda = engine_config(DriveParams(dtype="float32"), "cuda")
    assert on_cuda.rotated_keys and on_cuda.padded_logits
    on_cpu = engine_config(DriveParams(dtype="float32"), "cpu")
    assert on_cpu.rotated_keys and not on_cpu.padded_logits
    for name in switches:
        off = engine_config(DriveParams(dtype="float32").replace(**{name: False}), "cuda")
        follows = {"coc_reuse"} if name == "speculative" else set()
        assert getattr(off, name) is False and not any(getattr(off, f) for f in follows)
        assert all(getattr(off, other) for other in switches - {name} - follows - opt_in)


def test_drafter_file_names_a_safetensors_file_in_the_model_dir():
    from flashdrive_ros.ros.node import engine_config

    chosen = DriveParams(dtype="float32", drafter_file="drafter_mrope.safetensors")
    assert engine_config(chosen, "cpu").drafter_file == "drafter_mrope.safetensors"
    for bad in ("../drafter.safetensors", "drafter.pt", ""):
        with pytest.raises(ParameterError, match="drafter_file"):
            DriveParams(drafter_file=bad)
