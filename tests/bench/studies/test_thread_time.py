"""benchmarks.studies.thread_time: a native sample goes to the innermost category it shows (a socket call, the
garbage collector, a condition wait under a worker's Python as the GIL or as waiting for work), and a thread's
shares add up to its samples."""

from __future__ import annotations

from benchmarks.studies.thread_time import category_of, thread_shares

LOOP = ["Runner.run (asyncio/runners.py:118)", "uv_run (core.c:475)"]
SEND = "send (service/api/entry.py:52)"


def test_the_innermost_native_call_names_the_sample() -> None:
    assert category_of([*LOOP, "epoll_pwait (libc.so.6)"]) == "waiting for events (epoll)"
    assert category_of([*LOOP, SEND, "write (libc.so.6)"]) == "socket write"
    assert category_of([*LOOP, "Batcher.submit (service/batcher.py:90)", "getpid (libc.so.6)"]) == (
        "getpid (asyncio's running-loop check)"
    )
    assert category_of([*LOOP, "encode (tokenizers/__init__.py:1)", "gc_collect_main (gcmodule.c:1)"]) == (
        "garbage collector"
    )
    assert category_of([*LOOP, SEND]) == "Python, and native code it calls"  # a Python frame named send is not a call


def test_a_condition_wait_is_the_gil_after_a_run_and_work_awaited_in_the_queue() -> None:
    run = ["Worker._run (service/runtime.py:1)", "Session.run (onnxruntime/capi/onnxruntime_inference_collection.py:2)"]
    assert category_of([*run, "0x7f (libc.so.6)", "pthread_cond_timedwait (libc.so.6)", "0x7f0 (libc.so.6)"]) == (
        "waiting for the GIL"
    )
    assert category_of(run) == "ORT run"
    idle = ["Worker._serve (service/runtime.py:3)", "Lanes.next_batch (service/batcher.py:4)"]
    assert category_of([*idle, "pthread_cond_wait (libc.so.6)"]) == "waiting for a batch"


def test_each_threads_shares_are_of_its_own_samples() -> None:
    collapsed = "\n".join([
        "thread (1): MainThread;" + ";".join(LOOP) + ";epoll_pwait (libc.so.6) 3",
        "thread (1): MainThread;" + ";".join(LOOP) + f";{SEND};write (libc.so.6) 1",
        "thread (2): bertserve-worker-m-0;Worker._run (service/runtime.py:1) 2",
    ])  # fmt: skip
    shares = thread_shares(collapsed)
    assert shares["MainThread"] == {"waiting for events (epoll)": 0.75, "socket write": 0.25}
    assert shares["bertserve-worker-m-0"] == {"Python, and native code it calls": 1.0}
