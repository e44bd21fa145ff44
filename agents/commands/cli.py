"""The ``ppo`` console script: ``ppo train``, ``ppo eval``, ``ppo compare`` and ``ppo report``, parsed by tyro."""

from __future__ import annotations

import sys

import tyro

from agents.checkpoint import CheckpointError
from agents.config import TextTrainConfig, TrainConfig
from agents.ppo import NonFiniteLossError


TYRO_MARKERS = (tyro.conf.OmitArgPrefixes, tyro.conf.OmitSubcommandPrefixes)


def train_cli(config: TrainConfig | TextTrainConfig) -> None:
    from agents.train import train
    from agents.train_text import train_text

    run_dir = train_text(config) if isinstance(config, TextTrainConfig) else train(config)
    print(f"run written to {run_dir}")


def main() -> None:
    from agents.compare import CompareConfig, compare_cli
    from agents.evaluate import EvalConfig, evaluate_cli
    from agents.report import ReportConfig, report_cli
    arguments = sys.argv[1:]
    if arguments[:2] == ["train", "text"]:
        # `ppo train text ...`: the one word that switches from walkers to language models
        config = tyro.cli(TextTrainConfig, args=arguments[2:], prog="ppo train text", config=TYRO_MARKERS)
        handler = train_cli
    else:
        commands = {
            "train": (TrainConfig, train_cli),
            "eval": (EvalConfig, evaluate_cli),
            "compare": (CompareConfig, compare_cli),
            "report": (ReportConfig, report_cli),
        }
        config = tyro.extras.subcommand_cli_from_dict(
            {name: cls for name, (cls, _) in commands.items()},
            args=arguments,
            config=TYRO_MARKERS,
            prog="ppo",
            description="One PPO for MuJoCo walkers and language models. `ppo train text --help` for language models.",
        )
        handler = next(handle for cls, handle in commands.values() if isinstance(config, cls))
    try:
        status = handler(config)
    except NonFiniteLossError as error:
        sys.exit(f"error: {error} (the last checkpoint was left as it was)")
    except (ValueError, FileNotFoundError, CheckpointError) as error:
        sys.exit(f"error: {error}")
    sys.exit(status or 0)


if __name__ == "__main__":
    main()
