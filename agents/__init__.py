"""One PPO, two worlds. ``core`` is the PPO math; ``walkers`` and ``text`` are the two worlds that train on it;
``runs`` is the run-folder plumbing they share; ``commands`` is the ``ppo`` command line over all of them."""
