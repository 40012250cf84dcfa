"""Timing shared by the Python benchmark scripts."""
import statistics
import time


def median_seconds(fn, min_runs=20, min_seconds=0.5):
    """The median time of fn() over at least min_runs runs and min_seconds, after one warm-up run."""
    fn()  # warm up
    times = []
    start = time.perf_counter()
    while len(times) < min_runs or time.perf_counter() - start < min_seconds:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
