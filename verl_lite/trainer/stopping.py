"""Stopping a run on SIGTERM or SIGINT: the trainer stops at a safe point, the workers end, the exit says why.

The driver's handlers only note the signal; the driver's wait for the ``TaskRunner`` sees it within
``POLL_S`` and asks the runner to stop. The trainer stops before its next step (a safe point: the last
step is logged and, on schedule, checkpointed). A checkpoint being written is let finish for up to
``SAVE_GRACE_S`` (it is published atomically either way); any other step in progress is waited for
``STOP_GRACE_S`` only, then abandoned: the runner is killed, and Ray ends every actor it owned. A second
signal stops waiting at once. ``main_ppo`` exits 128 + the signal number (143 for SIGTERM, 130 for SIGINT).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any

import ray

# Seconds between two looks at the run and at the signals.
POLL_S = 0.2
# Seconds a run in the middle of a step gets to reach its next safe point before it is ended.
STOP_GRACE_S = 3.0
# Seconds a checkpoint being written gets to be published before the run is ended anyway.
SAVE_GRACE_S = 60.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StoppedBySignal(Exception):
    """The run was stopped by ``signum``; ``exit_code`` is the shell's 128 + signal number."""

    def __init__(self, signum: int, detail: str):
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name}: {detail}")


class SignalNotes:
    """While entered, SIGTERM and SIGINT are noted (``signum``: the first; ``repeated``: another came)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.repeated = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalNotes:
        return self.install()

    def install(self) -> SignalNotes:
        """(Re)take SIGTERM and SIGINT, e.g. after ``ray.init`` set a SIGTERM handler of its own.

        Only the main thread can take signals; elsewhere (a run started from a thread) this does nothing.
        """
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in STOP_SIGNALS:
            previous = signal.signal(signum, self._note)
            self._previous.setdefault(signum, previous)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _note(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        else:
            self.repeated = True


def wait_for_runner(runner: Any, ref: ray.ObjectRef, notes: SignalNotes) -> Any:
    """``ray.get(ref)`` of ``runner.run``, unless a signal comes first: then stop it and raise ``StoppedBySignal``."""
    while notes.signum is None:
        ready, _ = ray.wait([ref], timeout=POLL_S)
        if ready:
            return ray.get(ref)
    name = signal.Signals(notes.signum).name
    print(
        f"verl_lite: {name}: stopping the run at its next safe point (again to stop at once)", file=sys.stderr
    )
    start = time.monotonic()
    deadline = start + STOP_GRACE_S
    # whether a checkpoint is being written right now (the runner answers from its second thread)
    answer: ray.ObjectRef | None = runner.request_stop.remote()
    while time.monotonic() < deadline and not notes.repeated:
        if answer is not None and ray.wait([answer], timeout=0)[0]:
            try:
                if ray.get(answer):
                    deadline = start + SAVE_GRACE_S
            except Exception:  # the runner is gone: the run's result says why
                pass
            answer = None
        ready, _ = ray.wait([ref], timeout=POLL_S)
        if ready:
            try:
                history = ray.get(ref)
            except Exception as err:  # it failed while stopping: say so, still as a stop
                raise StoppedBySignal(notes.signum, f"the run failed while stopping: {err}") from None
            steps = [h["step"] for h in history if "step" in h]
            where = f"after step {steps[-1]}" if steps else "before the first step"
            raise StoppedBySignal(
                notes.signum, f"the trainer stopped {where}; every checkpoint written is complete."
            )
    ray.kill(runner, no_restart=True)  # the actors it owns end with it
    raise StoppedBySignal(
        notes.signum,
        "the run was ended before its next safe point (the step in progress is lost); resume from the newest "
        "checkpoint with a COMPLETE marker.",
    )
