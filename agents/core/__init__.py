"""The PPO core: the math and the update, shared by every policy and every environment.

It depends on torch and numpy only; nothing here knows a Gymnasium environment, a language model or
the command line. Rooms: ``batch`` (rollout storage), ``advantages`` (GAE, whitening), ``losses``
(surrogates, value loss), ``kl`` (estimators and coefficient controllers), ``objectives`` (the one
registry of objective names), ``config`` (the update's settings), ``optimizer`` (Adam, gradient
clipping), ``update`` (epochs x minibatches), ``policy`` (the Protocol a policy implements).
"""
