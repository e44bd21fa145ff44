"""The machine a benchmark ran on, in one line, and its raw Hopper-v5 stepping speed: every benchmark prints this
first, so a figure can be scaled to another machine (training speed follows raw stepping speed).

    python -m benchmarks.probes.machine
"""

from __future__ import annotations

import argparse

from benchmarks.harness import machine_header

if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(machine_header())
