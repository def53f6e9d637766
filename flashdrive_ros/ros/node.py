"""drive_node: the lifecycle node that runs the driving model.

configure: declare and validate parameters, load the engine, create the (lifecycle)
publishers. activate: warm the engine up, start from a fresh window buffer and streaming
state, subscribe, start the planner worker and the control-rate timer. deactivate:
unsubscribe, stop the timer and the worker. cleanup / shutdown: free the engine and the
publishers.

`main` spins the node on one thread: every callback runs on the spinning thread, while the
planner worker and the frame encoder run on threads of their own. A thread pool would hand
each callback to another thread, and every hand-over waits for the GIL that the model threads
hold between their tensor operations, so the callbacks would fall behind the 50 Hz odometry.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import time
from functools import cache, partial
from pathlib import Path

import rclpy
import rclpy.exceptions
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.utilities import remove_ros_args

from flashdrive_ros.engine.config import SWITCHES, EngineConfig
from flashdrive_ros.engine.dtype_choice import resolve_device, resolve_dtype
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.window import WindowBuilder, WindowLimits
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.ros import names
from flashdrive_ros.ros.frame_encoder import FrameEncoder
from flashdrive_ros.ros.inputs import InputSubscriptions
from flashdrive_ros.ros.outputs import OutputPublishers
from flashdrive_ros.ros.params import (
    DriveParams,
    ParameterError,
    add_validation_callback,
    declare_parameters,
    read_parameters,
)
from flashdrive_ros.ros.planner_loop import PlannerLoop

ENCODED_FRAMES_KEEP_S = 2.0


def usable_cores() -> int | None:
    """Cores this process may run on (its CPU affinity), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count()


def cpu_thread_count(requested: int, cores: int | None) -> int:
    """Intra-op threads for torch: `requested`, or with 0 every core but one (at least 1)."""
    if requested > 0:
        return requested
    return max(1, (cores or 1) - 1)


def engine_config(params: DriveParams, device: str) -> EngineConfig:
    """EngineConfig from the node parameters, each switch on where it applies
    (EngineConfig.where_applicable)."""
    return EngineConfig.where_applicable(
        {name: getattr(params, name) for name in SWITCHES}, mode=params.mode,
        num_samples=params.num_samples, device=device, backend=params.backend,
        dtype=resolve_dtype(params.dtype, device), drafter_file=params.drafter_file,
        forward_only=params.forward_only)


def set_torch_threads(count: int) -> dict[str, object]:
    """Intra-op threads of the calling thread's torch ops (OpenMP keeps the count per
    thread); returns the count in effect as {"cpu_threads": n}."""
    import torch

    torch.set_num_threads(count)
    return {"cpu_threads": torch.get_num_threads()}


def free_engine_memory() -> None:
    """Return the freed engine's cached CUDA memory to the device and, under glibc, the
    freed heap to the system."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    trim = heap_trim()
    if trim is not None:
        trim(0)


@cache
def heap_trim():
    """glibc's malloc_trim, or None where the C library has none (musl, macOS, Windows)."""
    if sys.platform != "linux":
        return None
    return getattr(ctypes.CDLL(None), "malloc_trim", None)


def window_builder(cfg: ModelConfig, camera_count: int,
                   frame_stand_in_s: float = WindowLimits.frame_stand_in) -> WindowBuilder:
    """A WindowBuilder with the model's frame count and spacing and ego-history length."""
    return WindowBuilder(camera_count, num_frames=cfg.prompt.num_frames,
                         frame_dt=cfg.prompt.frame_dt, num_history=cfg.action.num_history,
                         history_dt=cfg.action.history_dt,
                         limits=WindowLimits(frame_stand_in=frame_stand_in_s))


def load_engine(model_dir: Path, config: EngineConfig) -> Engine:

    return Engine.load(model_dir, config)


def autostart(node: LifecycleNode) -> bool:
    """Configure, then activate; False (with the reason logged by the node) on failure."""
    if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
        return False
    return node.trigger_activate() == TransitionCallbackReturn.SUCCESS


class DriveNode(LifecycleNode):
    def __init__(self, **kwargs) -> None:
        """kwargs go to rclpy's Node (context, namespace, cli_args, parameter_overrides)."""
        super().__init__(names.NODE_NAME, **kwargs)
        self._validation = None
        self.params: DriveParams | None = None
        self.engine: Engine | None = None
        self.cpu_threads = 1
        self.encoder: FrameEncoder | None = None
        self.loop: PlannerLoop | None = None
        self.outputs: OutputPublishers | None = None
        self.inputs: InputSubscriptions | None = None
        self._timer = None

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            declare_parameters(self)
            params = read_parameters(self)
        except (ParameterError, rclpy.exceptions.ParameterException) as exc:
            self.get_logger().error(f"configure failed: invalid parameters: {exc}")
            return TransitionCallbackReturn.FAILURE
        if self._validation is None:
            self._validation = add_validation_callback(self, self._on_parameters_accepted)
        try:
            device = resolve_device(params.device)
            threads = cpu_thread_count(params.cpu_threads, usable_cores())
            set_torch_threads(threads)
            config = engine_config(params, device)
            engine = load_engine(params.resolved_model_dir, config)
        except Exception as exc:
            self.get_logger().error(f"configure failed: engine could not be loaded from "
                                    f"{params.resolved_model_dir}: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.FAILURE
        model_cameras = list(engine.model.cfg.prompt.camera_names)
        if len(model_cameras) != len(params.camera_names):
            self.get_logger().error(f"configure failed: {len(params.camera_names)} cameras "
                                    f"configured, the model takes {len(model_cameras)} "
                                    f"({model_cameras})")
            engine = None
            free_engine_memory()
            return TransitionCallbackReturn.FAILURE
        if model_cameras != params.camera_names:
            self.get_logger().warning(f"camera_names {params.camera_names} differ from the "
                                      f"model's camera slots {model_cameras}; images are fed "
                                      f"in camera_names order")
        self.params = params
        self.engine = engine
        self.cpu_threads = threads
        action = engine.model.cfg.action
        self.outputs = OutputPublishers(self, params, action.num_waypoints, action.dt)
        for adjustment in config.adjustments:
            self.get_logger().warning(f"engine setting adjusted: {adjustment}")
        self.get_logger().info(f"configured: model {params.resolved_model_dir}, "
                               f"{config.mode} on {device} as {config.dtype} "
                               f"({threads} CPU threads), {len(params.camera_names)} cameras")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        params = read_parameters(self)
        self.params = params
        self.outputs.params = params
        try:
            self.engine.warmup()
        except Exception as exc:
            self.get_logger().error(f"activate failed: engine warm-up: "
                                    f"{type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.FAILURE
        self.engine.reset()
        overlay_index = (params.camera_names.index(params.overlay_camera)
                         if params.overlay_camera else None)
        self.encoder = None
        self.engine.keep_encoded_frames(ENCODED_FRAMES_KEEP_S if params.encode_ahead else None)
        if params.encode_ahead:
            self.encoder = FrameEncoder(self.engine.encode_camera_set,
                                        worker_setup=partial(set_torch_threads, 1),
                                        on_error=self._on_encoder_error)
        self.loop = PlannerLoop(self.engine, window_builder(self.engine.model.cfg,
                                                           len(params.camera_names),
                                                           params.frame_stand_in_s),
                                params.camera_names, overlay_index,
                                limits=params.plan_limits,
                                stay_streaming=self.engine.cfg.streaming,
                                act_apart=params.act_apart and self.engine.graphs is None,
                                worker_setup=partial(set_torch_threads, self.cpu_threads),
                                on_camera_set=self.encoder.submit if self.encoder else None,
                                late_tolerance_s=params.late_tolerance_s)
        self.outputs.reset()
        self.inputs = InputSubscriptions(self, params, self.loop, self.outputs.set_camera_info,
                                         self.engine.image_size)
        if self.encoder is not None:
            self.encoder.start()
        self.loop.start()
        self._timer = self.create_timer(1.0 / params.control_rate_hz, self._tick)
        self.get_logger().info(f"active: planning at {params.control_rate_hz} Hz")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_activity()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release_all()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().error(f"error in state {state.label}; releasing everything")
        self.release_all()
        return TransitionCallbackReturn.SUCCESS

    def release_all(self) -> None:
        """Stop the worker and free everything, whatever the lifecycle state."""
        self._stop_activity()
        self._release()

    def _stop_activity(self) -> None:
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None
        if self.inputs is not None:
            self.inputs.destroy()
            self.inputs = None
        if self.loop is not None:
            self.loop.stop()
            self.loop = None
        if self.encoder is not None:
            self.encoder.stop()
            self.encoder = None

    def _release(self) -> None:
        if self.outputs is not None:
            self.outputs.destroy()
            self.outputs = None
        if self.engine is not None:
            self.engine = None
            free_engine_memory()

    def _tick(self) -> None:
        outputs, loop, inputs = self.outputs, self.loop, self.inputs
        if outputs is None or loop is None or inputs is None:
            return
        now = self.get_clock().now().nanoseconds * 1e-9
        outputs.tick(loop, now, time.monotonic(), inputs.silence_hint)

    def _on_encoder_error(self, reason: str) -> None:
        loop = self.loop
        if loop is not None:
            loop.set_extra("frame_encoder_error", reason)

    def _on_parameters_accepted(self, params: DriveParams) -> None:
        outputs, loop = self.outputs, self.loop
        if outputs is not None:
            outputs.params = params
        if loop is not None:
            loop.limits = params.plan_limits


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """Non-ROS command-line arguments (ROS arguments go after --ros-args)."""
    parser = argparse.ArgumentParser(prog="drive_node", description="FlashDrive lifecycle "
                                     "driving node; ROS arguments follow --ros-args.")
    parser.add_argument("--autostart", action="store_true",
                        help="configure and activate on start (no lifecycle manager needed)")
    return parser.parse_args(argv)


def spin_until_shutdown(executor, context) -> None:
    """executor.spin() until the context shuts down (Ctrl-C, SIGTERM, rclpy.shutdown). A
    shutdown from the signal handler can land while spin builds its wait set, which then fails
    on the invalid context: that is a shutdown too; any error with the context still valid is
    raised."""
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        return
    except RuntimeError:
        if context.ok():
            raise


def main(args: list[str] | None = None) -> None:
    argv = sys.argv if args is None else args
    options = parse_arguments(remove_ros_args(argv)[1:])
    rclpy.init(args=argv)
    node = DriveNode()
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        if options.autostart and not autostart(node):
            raise SystemExit(1)
        spin_until_shutdown(executor, node.context)
    except KeyboardInterrupt:
        pass
    finally:
        node.release_all()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
