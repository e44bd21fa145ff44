"""The benchmark suite (benchmarks/README.md): run each script as a module from the repository root,
``python -m benchmarks.<folder>.<script>``."""
