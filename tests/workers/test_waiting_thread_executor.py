"""WaitingThreadExecutor: work runs on a thread waiting for a result, else on the executor's own thread."""

import concurrent.futures
import threading
import time

import pytest

from verl_lite.workers.rollout.host import WaitingThreadExecutor


@pytest.fixture
def executor():
    executor = WaitingThreadExecutor()
    yield executor
    executor.shutdown()


def test_work_submitted_while_a_thread_waits_runs_on_that_thread(executor):
    result: concurrent.futures.Future = concurrent.futures.Future()
    ran_on = []

    def hand_out_work():  # in ServerHost, the event loop's thread: it submits work, then finishes
        _until(lambda: executor._waiting == 1)
        ran_on.append(executor.submit(threading.get_ident).result(timeout=30))
        result.set_result("done")

    helper = threading.Thread(target=hand_out_work)
    helper.start()
    assert executor.wait(result, timeout=30) == "done"
    helper.join()
    assert ran_on == [threading.get_ident()]


def test_without_a_waiting_thread_work_runs_on_the_executors_own_thread_always_the_same(executor):
    threads = {executor.submit(threading.get_ident).result(timeout=30) for _ in range(5)}
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_work_left_queued_when_the_last_waiter_returns_still_runs(executor):
    # The waited-on future and a piece of work finish together: whichever the waiter sees first, the work
    # must not stay queued with nobody to run it.
    for _ in range(50):
        done: concurrent.futures.Future = concurrent.futures.Future()
        handed: list[concurrent.futures.Future] = []

        def finish_both(done=done, handed=handed):
            _until(lambda: executor._waiting == 1)
            handed.append(executor.submit(lambda: 7))
            done.set_result(None)

        helper = threading.Thread(target=finish_both)
        helper.start()
        executor.wait(done, timeout=30)
        helper.join()
        assert handed[0].result(timeout=30) == 7


def test_an_error_reaches_whoever_waits_for_the_work(executor):
    def fail():
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        executor.submit(fail).result(timeout=30)


def test_wait_raises_timeout_error_and_then_runs_nothing_more(executor):
    never: concurrent.futures.Future = concurrent.futures.Future()
    with pytest.raises(TimeoutError):
        executor.wait(never, timeout=0.05)
    assert executor._waiting == 0
    assert executor.submit(threading.get_ident).result(timeout=30) != threading.get_ident()


def _until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.0005)
