"""Peak memory of one phase of an iteration (sampling, update, evaluation): on CUDA the caching allocator's peak
of allocated bytes, on the CPU the process's peak resident set (Linux ``VmHWM``, reset through
``/proc/self/clear_refs``). Elsewhere there is no per-phase figure and the probe says nothing.
"""

from __future__ import annotations

from pathlib import Path

import torch

from agents.core.distributed import gather_objects

GIB = 1024**3
STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
RESET_PEAK_RSS = "5"  # Linux: "5" resets VmHWM to the current resident set (Documentation/filesystems/proc.rst)


def reset_peak_memory(device: torch.device) -> None:
    """Start a new phase: the next ``peak_memory_gb`` counts from here."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        CLEAR_REFS.write_text(RESET_PEAK_RSS)
    except OSError:  # not Linux, or a kernel that refuses: the CPU peak is then the process's lifetime peak
        pass


def peak_memory_gb(device: torch.device) -> float | None:
    """GiB at the peak since the last ``reset_peak_memory``: allocated tensors on CUDA, the resident set on the
    CPU (weights, activations, the allocator's free lists, Python); None where neither can be read."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB
    try:
        lines = STATUS.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / GIB  # the kernel reports kB
    return None


def largest_peaks(peaks: dict[str, float | None]) -> dict[str, float]:
    """Each phase's peak on the process where it was largest (every process calls this together); the phases
    without a figure are left out."""
    known = {name: peak for name, peak in peaks.items() if peak is not None}
    every_process = gather_objects(known)
    return {name: max(process[name] for process in every_process) for name in known}
