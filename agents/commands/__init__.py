"""The ``ppo`` command line: train, eval, compare and report, over both worlds."""
