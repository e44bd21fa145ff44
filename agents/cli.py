"""The ``ppo`` console script: ``ppo train`` and ``ppo eval``, parsed by tyro."""

from __future__ import annotations

import sys

import tyro

from agents.checkpoint import CheckpointError
from agents.config import TrainConfig
from agents.ppo import NonFiniteLossError


def main() -> None:
    from agents.evaluate import EvalConfig, evaluate_cli
    from agents.train import train

    commands = {
        "train": (TrainConfig, lambda config: print(f"run written to {train(config)}")),
        "eval": (EvalConfig, evaluate_cli),
    }
    config = tyro.extras.subcommand_cli_from_dict(
        {name: cls for name, (cls, _) in commands.items()},
        config=(tyro.conf.OmitArgPrefixes,),
        prog="ppo",
        description="One PPO for MuJoCo walkers (and, later, language models).",
    )
    handler = next(handle for cls, handle in commands.values() if isinstance(config, cls))
    try:
        handler(config)
    except NonFiniteLossError as error:
        sys.exit(f"error: {error} (the last checkpoint was left as it was)")
    except (ValueError, FileNotFoundError, CheckpointError) as error:
        sys.exit(f"error: {error}")


if __name__ == "__main__":
    main()
