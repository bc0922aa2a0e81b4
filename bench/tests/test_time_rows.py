#!/usr/bin/env python3
"""bench_all.Timer.time_rows on the CPU, with sample() and measure_flush() replaced: the interleaved results land in
their rows in order, derive() adds units, only rows with a launch function get the do_bench-style number, and a
failure of either step is written into the rows it hit instead of raising."""
import os
import sys

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


def main():
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
    print(f"{1 if not failures else 0} passed, {1 if failures else 0} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
