"""Token-level text generation environments; importing this registers ``ppo/TextGen-v0`` with Gymnasium."""

from envs.text.env import ENV_ID, TextGenEnv, register

register()

__all__ = ["ENV_ID", "TextGenEnv", "register"]
