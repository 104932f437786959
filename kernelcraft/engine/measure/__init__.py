"""The timing a profile rests on, run in the worker on a GPU.

Owns the timers (`timing.py`), input rotation (`rotation.py`), timing statistics
(`samples.py`), roofline floors (`roofline.py`), per-kernel breakdowns (`kernelprof.py`) and the
reference's cached timings (`timingcache.py`). May import `wire`. Called by `worker` and `host`.
"""
