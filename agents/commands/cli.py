"""The ``ppo`` console script: ``ppo train [text]``, ``ppo eval``, ``ppo compare`` and ``ppo report``,
parsed by tyro.
"""

from __future__ import annotations

import os
import sys

import tyro

from agents.commands.compare import CompareConfig, compare_cli
from agents.commands.evaluate import EvalConfig, evaluate_cli
from agents.commands.report import ReportConfig, report_cli
from agents.commands.train_args import TEXT_WORD, TYRO_MARKERS, parse_train_args, run_training
from agents.core.update import NonFiniteLossError
from agents.runs.checkpoint import CheckpointError
from agents.text.config import TextTrainConfig
from agents.walkers.config import TrainConfig


def train_cli(config: TrainConfig | TextTrainConfig) -> None:
    run_dir = run_training(config)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, the first process speaks for the run
        print(f"run written to {run_dir}")


def main() -> None:
    arguments = sys.argv[1:]
    if arguments[:1] == ["train"]:
        config = parse_train_args(arguments[1:])
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
            description=(
                f"One PPO for MuJoCo walkers and language models. `ppo train {TEXT_WORD} --help` for language models."
            ),
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
