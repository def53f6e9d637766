"""Per-input health of the planner loop: receipts, last stamps, faults held for FAULT_HOLD_S
so that periodic diagnostics see them, and silence. Not locked: the loop calls it under its
own lock."""

from __future__ import annotations

from collections.abc import Callable

from flashdrive_ros.ros.diagnostics import InputHealth

FAULT_HOLD_S = 2.0


class InputHealthBook:
    def __init__(self, names: list[str], clock: Callable[[], float]) -> None:
        self.inputs = {name: InputHealth(name) for name in names}
        self.clock = clock

    def received(self, name: str) -> None:
        health = self.inputs[name]
        health.received += 1
        health.last_receipt = self.clock()

    def ok(self, name: str, stamp: float) -> None:
        """Good data clears a fault once FAULT_HOLD_S has passed since it was seen."""
        health = self.inputs[name]
        if health.fault_at is None or self.clock() - health.fault_at > FAULT_HOLD_S:
            health.fault = ""
        health.last_stamp = stamp

    def fault(self, name: str, reason: str) -> None:
        health = self.inputs[name]
        health.fault = health.last_fault = reason
        health.fault_at = self.clock()
        health.faults_total += 1

    def silent(self, timeout_s: float) -> list[tuple[InputHealth, str]]:
        """(input, "silent: ...") of the inputs that received nothing for `timeout_s`; a
        silence fault of an input heard since is cleared."""
        now = self.clock()
        silent = []
        for health in self.inputs.values():
            since = None if health.last_receipt is None else now - health.last_receipt
            if since is None or since > timeout_s:
                waited = "never received" if since is None else f"silent for {since:.2f} s"
                silent.append((health, f"silent: {waited}"))
            elif health.fault.startswith("silent"):
                health.fault = ""
        return silent

    def copies(self) -> list[InputHealth]:
        return [InputHealth(**vars(h)) for h in self.inputs.values()]
