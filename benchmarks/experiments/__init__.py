"""The results-producing experiments: sweeps and grids of runs, and the tables and figures made from them."""
