"""Small measurements: the machine, reproducibility, scaling over processes, memory, batching, the GPU path."""
