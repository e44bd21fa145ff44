"""Token-level text generation environments; importing this registers ``ppo/TextGen-v0`` and the multi-turn game
ids (``ppo/GuessNumber-v0``, ``ppo/Mastermind-v0``, ``ppo/Calculator-v0``, ``ppo/MultiTurn-v0``) with Gymnasium."""

from envs.text import multi_turn
from envs.text.env import ENV_ID, TextGenEnv, register
from envs.text.multi_turn import MultiTurnTextEnv, TokenRole

register()
multi_turn.register()

__all__ = ["ENV_ID", "MultiTurnTextEnv", "TextGenEnv", "TokenRole", "register"]
