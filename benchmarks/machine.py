"""The machine a benchmark ran on, in one line, and its raw Hopper-v5 stepping speed: every benchmark prints this
first, so a figure can be scaled to another machine (training speed follows raw stepping speed).

    python benchmarks/machine.py
"""

from __future__ import annotations

from agents.runs.machine import describe_machine, machine_line
from envs.mujoco import raw_stepping_speed


def machine_header() -> str:
    """``machine: <processor, cores, kernels, versions>`` and ``raw Hopper-v5 stepping: N steps/s``."""
    speed = raw_stepping_speed("Hopper-v5")
    return f"machine: {machine_line(describe_machine())}\nraw Hopper-v5 stepping (random actions): {speed:,.0f} steps/s"


if __name__ == "__main__":
    print(machine_header())
