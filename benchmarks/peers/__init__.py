"""Speed against the peers: Stable-Baselines3 on the walkers, TRL on language models."""
