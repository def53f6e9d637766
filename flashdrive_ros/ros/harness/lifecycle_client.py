"""Drives a lifecycle node through its `change_state` and `get_state` services.

A service answer is lost when the server's response writer has not yet matched the client's
response reader at the moment it answers: discovery of the two directions of a service is
independent, and rmw_fastrtps waits 100 ms for the match before it drops the answer. A node
that answers at once (a configure that fails straight away) right after discovery can lose
its answer that way, more often on a loaded machine. So get_state, which changes nothing, is
asked again until it answers, and a transition is requested only after get_state answered:
by then the node has matched this client's response readers, the change_state one included
(it is created, and announced, first).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from lifecycle_msgs.srv import ChangeState, GetState
from rclpy.node import Node

POLL_S = 0.02
RESEND_S = 1.0


class LifecycleError(RuntimeError):
    pass


class LifecycleClient:
    """Calls `<target>/change_state` and `<target>/get_state`; an executor must spin `node`.
    `alive` (when given) is polled while waiting; a False ends the wait with an error."""

    def __init__(self, node: Node, target: str,
                 alive: Callable[[], bool] | None = None) -> None:
        self.target = target
        self.alive = alive or (lambda: True)
        self.change = node.create_client(ChangeState, f"{target}/change_state")
        self.get = node.create_client(GetState, f"{target}/get_state")

    def _poll(self, ready: Callable[[], bool], timeout_s: float, what: str) -> bool:
        """True once `ready()`; False after timeout_s; raises if the target exited."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            if not self.alive():
                raise LifecycleError(f"{self.target} exited while waiting for {what}")
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        return True

    def _wait(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        if not self._poll(ready, timeout_s, what):
            raise LifecycleError(f"{what} did not happen within {timeout_s} s")

    def _wait_for_service(self, client, timeout_s: float) -> None:
        self._wait(client.service_is_ready, timeout_s, f"service {client.srv_name} to appear")

    def state(self, timeout_s: float = 10.0) -> str:
        """The target's state label; the request is sent again every RESEND_S until an
        answer comes."""
        self._wait_for_service(self.get, timeout_s)
        what = f"an answer from {self.get.srv_name}"
        deadline = time.monotonic() + timeout_s
        while True:
            future = self.get.call_async(GetState.Request())
            left = deadline - time.monotonic()
            if self._poll(future.done, min(RESEND_S, max(left, 0.0)), what):
                return future.result().current_state.label
            self.get.remove_pending_request(future)
            if time.monotonic() >= deadline:
                raise LifecycleError(f"{what} did not happen within {timeout_s} s")

    def transition(self, transition_id: int, timeout_s: float) -> None:
        """Request the transition once get_state has answered; raise unless it succeeded."""
        self._wait_for_service(self.change, timeout_s)
        self.state(timeout_s)
        request = ChangeState.Request()
        request.transition.id = transition_id
        future = self.change.call_async(request)
        self._wait(future.done, timeout_s, f"an answer from {self.change.srv_name}")
        if not future.result().success:
            raise LifecycleError(f"{self.target}: transition {transition_id} failed (state "
                                 f"now {self.state()})")
