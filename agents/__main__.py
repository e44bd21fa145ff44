"""``python -m agents ...`` (and ``torchrun -m agents ...``) is the ``ppo`` command."""

from agents.commands.cli import main

main()
