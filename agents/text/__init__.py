"""The text world: a causal LM actor-critic, KV-cached sampling, the text rollout, training loop and evaluation."""
