"""One through-ROS session: a drive node process, a StreamPlayer and a NodeObserver on a
loopback context of this process, matched before anything is played."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from flashdrive_ros.ros.harness.loopback import local_context, loopback_domain_id
from flashdrive_ros.ros.harness.node_observer import NodeObserver
from flashdrive_ros.ros.harness.node_process import NodeProcess
from flashdrive_ros.ros.harness.stream_player import StreamPlayer

START_TIMEOUT_S = 300.0


class SessionError(RuntimeError):
    pass


@dataclass
class Session:
    node: NodeProcess
    player: StreamPlayer
    observer: NodeObserver
    feeder: Node


def wait_until(ready, node: NodeProcess, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if not node.alive():
            raise SessionError(f"{node.name} exited while waiting for {what}; log:\n"
                               f"{node.log_tail()}")
        if time.monotonic() > deadline:
            raise SessionError(f"{what} did not happen within {timeout_s} s; log:\n"
                               f"{node.log_tail()}")
        time.sleep(0.05)


@contextmanager
def node_session(name: str, parameters: dict, topics: dict[str, str], out_dir: Path,
                 rate: float = 1.0, domain_id: int | None = None) -> Iterator[Session]:
    """`topics`: input topic -> message type; parameters: drive node parameters (DriveParams
    names). Yields once the node is active and every input and output is matched."""
    domain = loopback_domain_id() if domain_id is None else domain_id
    context = local_context(domain)
    node = Node(f"{name}_feeder", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        player = StreamPlayer(node, topics, rate)
        observer = NodeObserver(node, name)
        with NodeProcess(name, parameters, domain, out_dir) as process:
            wait_until(lambda: not player.wait_for_subscribers(list(topics), 0.0)
                       and observer.matched(), process, START_TIMEOUT_S,
                       f"{name} to subscribe to the inputs and publish its outputs")
            yield Session(process, player, observer, node)
    finally:
        executor.shutdown()
        node.destroy_node()
        context.shutdown()
        spinner.join(timeout=5.0)
