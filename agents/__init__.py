"""One PPO, two worlds. ``core`` is the PPO math; ``walkers`` and ``text`` are the two worlds that train on it;
``runs`` is the run-folder plumbing they share; ``commands`` is the ``ppo`` command line over all of them."""

import time

PROCESS_STARTED = time.perf_counter()
"""When this process first imported the package, the first thing ``ppo`` and ``python -m agents`` do: the start of
the wall clock ``elapsed_seconds`` reports (the interpreter's own start-up before it, ~0.05 s, is not counted)."""
