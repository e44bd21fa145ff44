"""Run plumbing shared by both worlds: run folders, config files, metrics logging, checkpoints, device choice."""
