"""The walkers world: a Gaussian MLP actor-critic on Gymnasium MuJoCo tasks, its rollout, training loop and
evaluation.
"""
