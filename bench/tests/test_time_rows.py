#!/usr/bin/env python3
"""bench_all.Timer on the CPU. time_rows with sample() and measure_flush() replaced: the interleaved results land in
their rows in order, derive() adds units, only rows with a launch function get the do_bench-style number, and a
failure of either step is written into the rows it hit instead of raising. prepare() and sample() against a stand-in
for torch.cuda whose graphs, like CUDA graphs (raw device pointers), keep no reference to what their launches use:
a prepared row keeps its launch functions' tensors alive until sample() has replayed it, even when the caller keeps
nothing."""
import contextlib
import gc
import os
import sys
import weakref

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_all  # noqa: E402  (torch is imported only in bench_all.main)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


class FakeTimer(bench_all.Timer):
    def __init__(self, sample_error=None, flush_error=None):
        super().__init__(samples=5, budget_ms=100, replay_us=1000, max_launches=10, warmup_replays=1)
        self.sample_error, self.flush_error, self.sampled, self.flushed = sample_error, flush_error, None, []

    def sample(self, preps):
        if self.sample_error:
            raise RuntimeError(self.sample_error)
        self.sampled = list(preps)
        return [dict(us=float(h)) for h in preps]  # the handle is the time

    def measure_flush(self, fn):
        if self.flush_error:
            raise RuntimeError(self.flush_error)
        self.flushed.append(fn())
        return dict(flush_us=fn())


class FakeCuda:
    """The torch.cuda calls Timer.prepare / sample make. A graph records, while capturing, weak references to the
    buffers its launches write (Buffer.launch); replaying a graph whose buffer is gone is the illegal address."""

    def __init__(self):
        self.capturing = None
        self.clock = 0.0

    def synchronize(self):
        pass

    class Event:
        def __init__(self, enable_timing=True):
            self.t = 0.0

        def record(self):
            self.t = FAKE.clock
            FAKE.clock += 0.25

        def elapsed_time(self, end):
            return end.t - self.t

    class Stream:
        def wait_stream(self, other):
            pass

    def current_stream(self):
        return FakeCuda.Stream()

    @contextlib.contextmanager
    def stream(self, s):
        yield

    class CUDAGraph:
        def __init__(self):
            self.targets = []

        def replay(self):
            for ref in self.targets:
                if ref() is None:
                    raise RuntimeError("illegal memory access: a replayed launch writes a freed buffer")

    @contextlib.contextmanager
    def graph(self, g, capture_error_mode="global"):
        self.capturing = g
        try:
            yield
        finally:
            self.capturing = None


FAKE = FakeCuda()


class Buffer:
    """A stand-in for an output tensor allocated outside the capture."""

    def launch(self):
        if FAKE.capturing is not None:
            FAKE.capturing.targets.append(weakref.ref(self))


def launch_fns(copies):
    """Launch functions as bench_all's kerntune rows build them: each closes over its output buffer; the caller keeps
    only the list it passes on. Returns the functions and weak references to their buffers."""
    bufs = [Buffer() for _ in range(copies)]
    return [(lambda b=b: b.launch()) for b in bufs], [weakref.ref(b) for b in bufs]


def check_prepare_keeps_buffers():
    bench_all.torch = type("FakeTorch", (), {"cuda": FAKE})
    t = bench_all.Timer(samples=5, budget_ms=100, replay_us=1000, max_launches=10, warmup_replays=1)
    fns, refs = launch_fns(3)
    handle = t.prepare(fns)
    del fns
    gc.collect()
    check(all(r() is not None for r in refs), "a prepared row keeps its launch functions' buffers alive")
    check(handle["mode"] == "graph", "the stand-in captures a graph")
    try:
        res = t.sample([handle])
        check(len(res) == 1 and res[0]["timing"] == "graph", "the row is timed from its graph")
    except RuntimeError as e:
        check(False, f"sample() replayed a graph whose buffers were freed: {e}")
    del handle
    gc.collect()
    check(all(r() is None for r in refs), "after sample() the buffers can be freed")


def main():
    check_prepare_keeps_buffers()
    rows = [dict(name="a"), dict(name="b"), dict(name="c")]
    t = FakeTimer()
    t.time_rows([(rows[0], 2.0, None), (rows[1], 4.0, lambda: 7.0), (rows[2], 8.0, None)],
                lambda r: r.update(rate=1.0 / r["us"]))
    check(t.sampled == [2.0, 4.0, 8.0], "every handle sampled once, in order")
    check([r.get("us") for r in rows] == [2.0, 4.0, 8.0], "each result in its own row")
    check([r.get("rate") for r in rows] == [0.5, 0.25, 0.125], "derive() ran on every timed row")
    check(t.flushed == [7.0] and rows[1].get("flush_us") == 7.0 and "flush_us" not in rows[0],
          "do_bench-style number only for the row with a launch function")

    rows = [dict(), dict()]
    FakeTimer(sample_error="boom").time_rows([(rows[0], 1.0, lambda: 1.0), (rows[1], 2.0, None)], lambda r: None)
    check(all("timing failed: " in r.get("error", "") and "us" not in r for r in rows), "a sample() failure marks every row")

    rows = [dict(), dict()]
    FakeTimer(flush_error="late").time_rows([(rows[0], 1.0, lambda: 1.0), (rows[1], 2.0, None)], lambda r: None)
    check("do_bench-style timing failed" in rows[0].get("error", "") and rows[0]["us"] == 1.0, "flush failure kept as error")
    check("error" not in rows[1], "a flush failure touches only its own row")

    FakeTimer().time_rows([], lambda r: None)  # no rows: nothing sampled, no error
    for f in failures:
        print("FAILED:", f)
    print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
