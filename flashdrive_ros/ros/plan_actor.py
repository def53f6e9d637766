"""The actor thread of a planner that acts apart: it runs the flow matching of one reasoned
window at a time (Engine.act over detached copies of the cache) while the worker reasons the
next window."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from flashdrive_ros.engine.types import Plan, Window

if TYPE_CHECKING:
    from flashdrive_ros.engine.engine import Reasoning

WAIT_S = 0.1


class PlanActor:
    """`act(reasoning)` runs on the actor thread; `on_done(window, plan, problem, time_base)`
    gets the plan (problem "") or None and the error, with the time base the window was
    handed off under, and returns True when the engine must be reset
    before the worker's next window (`take_reset_request`). `setup` runs on the actor thread
    before its first window."""

    def __init__(self, act: Callable[[Reasoning], Plan],
                 on_done: Callable[[Window, Plan | None, str, int], bool],
                 setup: Callable[[], object] | None = None) -> None:
        self.act = act
        self.on_done = on_done
        self.setup = setup
        self._handoff = threading.Condition(threading.Lock())
        self._pending: tuple[Window, Reasoning, int] | None = None
        self._acting = False
        self._reset_requested = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="planner-actor", daemon=True)

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        with self._handoff:
            self._handoff.notify_all()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise RuntimeError(f"{self._thread.name} did not stop within {timeout_s} s")

    def take_reset_request(self) -> bool:
        with self._handoff:
            requested, self._reset_requested = self._reset_requested, False
        return requested

    def hand_off(self, window: Window, reasoning: Reasoning, time_base: int) -> bool:
        """Give the actor `reasoning` once it is done with the window before; False when the
        actor stopped first."""
        with self._handoff:
            while self._acting and not self._stop.is_set():
                self._handoff.wait(WAIT_S)
            if self._stop.is_set():
                return False
            self._pending, self._acting = (window, reasoning, time_base), True
            self._handoff.notify_all()
        return True

    def _run(self) -> None:
        if self.setup is not None:
            self.setup()
        while True:
            with self._handoff:
                while self._pending is None and not self._stop.is_set():
                    self._handoff.wait(WAIT_S)
                if self._pending is None:
                    return
                (window, reasoning, time_base), self._pending = self._pending, None
            try:
                plan, problem = self.act(reasoning), ""
            except Exception as exc:
                plan, problem = None, f"{type(exc).__name__}: {exc}"
            reset = self.on_done(window, plan, problem, time_base)
            with self._handoff:
                self._reset_requested = self._reset_requested or reset
                self._acting = False
                self._handoff.notify_all()
