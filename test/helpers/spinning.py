"""Nodes of one process spun apart: each on a single-threaded executor and thread of its own,
as drive_node spins in its own process, so that a busy test node cannot starve another's
subscriptions."""

import threading

from rclpy.executors import SingleThreadedExecutor


class SpinningApart:
    """Spins each of `nodes` on its own executor thread from construction until `stop()`."""

    def __init__(self, context, *nodes):
        self.executors = [SingleThreadedExecutor(context=context) for _ in nodes]
        for executor, node in zip(self.executors, nodes):
            executor.add_node(node)
        self.threads = [threading.Thread(target=e.spin, daemon=True) for e in self.executors]
        for thread in self.threads:
            thread.start()

    def stop(self):
        for executor in self.executors:
            executor.shutdown()
        for thread in self.threads:
            thread.join(10)
