"""What machine a figure came from: the processor, its cores, the instruction set torch's kernels dispatch to, and the
versions of the libraries that decide the numbers. Runs write it to ``machine.json``; reports and benchmarks print it.

Seeded walker runs repeat exactly on one machine but not across processors (docs/results.md, "Reproducibility"):
torch picks its kernels by instruction set, so the same seed can end at a different return elsewhere.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

MACHINE_FILE = "machine.json"
LIBRARIES = ("torch", "mujoco", "gymnasium", "transformers")
"""The libraries whose versions are recorded: those that compute what a run's numbers are made of."""


@dataclass(frozen=True)
class MachineRecord:
    """One machine, as far as it decides a run's numbers and speed."""

    processor: str
    """The processor's model name (``/proc/cpuinfo``), or what ``platform`` says where there is none."""
    logical_cpus: int
    """CPUs this process may run on."""
    torch_cpu_capability: str
    """The SIMD level torch's eager CPU kernels use here (``torch.backends.cpu.get_cpu_capability()``)."""
    native_bf16: bool
    """Whether the processor has bf16 instructions (AVX-512-BF16 or AMX-BF16), where bf16 autocast pays."""
    gpu: str | None
    """The first CUDA device's name, or None."""
    versions: dict[str, str | None]
    """Python and each library of ``LIBRARIES``: its installed version, None if not installed."""


def cpu_info() -> tuple[str, set[str]]:
    """The processor's model name and its feature flags, from ``/proc/cpuinfo`` (Linux); elsewhere ``platform``'s."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine(), set()
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    return fields.get("model name", platform.machine()), set(fields.get("flags", "").split())


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe_machine() -> MachineRecord:
    """This machine's record."""
    processor, flags = cpu_info()
    return MachineRecord(
        processor=processor,
        logical_cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
        torch_cpu_capability=torch.backends.cpu.get_cpu_capability(),
        native_bf16=bool(flags & {"avx512_bf16", "amx_bf16"}),
        gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        versions={"python": platform.python_version(), **{name: installed_version(name) for name in LIBRARIES}},
    )


def machine_line(record: MachineRecord) -> str:
    """One line for a benchmark's or a report's header."""
    versions = ", ".join(f"{name} {version}" for name, version in record.versions.items() if version)
    bf16 = "native bf16" if record.native_bf16 else "no native bf16"
    gpu = f", GPU {record.gpu}" if record.gpu else ", no GPU"
    return (
        f"{record.processor}, {record.logical_cpus} logical CPUs, torch {record.torch_cpu_capability} kernels, "
        f"{bf16}{gpu}; {versions}"
    )


def read_machines(run_dir: Path) -> list[MachineRecord]:
    """The machines a run was trained on, in order (a run resumed elsewhere has several); [] for older runs."""
    path = run_dir / MACHINE_FILE
    if not path.is_file():
        return []
    return [MachineRecord(**entry) for entry in json.loads(path.read_text())]


def record_machine(run_dir: Path) -> None:
    """Add this machine to the run's ``machine.json`` unless it is the one the run last ran on."""
    machines = read_machines(run_dir)
    here = describe_machine()
    if machines and machines[-1] == here:
        return
    entries = [dataclasses.asdict(record) for record in [*machines, here]]
    (run_dir / MACHINE_FILE).write_text(json.dumps(entries, indent=2) + "\n")
