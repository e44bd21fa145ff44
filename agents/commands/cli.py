"""The ``ppo`` console script: ``ppo train [text]``, ``ppo eval``, ``ppo compare`` and ``ppo report``,
parsed by tyro.
"""

from __future__ import annotations

import functools
import os
import sys

import tyro

from agents.commands.compare import CompareConfig, compare_cli
from agents.commands.evaluate import EvalConfig, evaluate_cli
from agents.commands.report import ReportConfig, report_cli
from agents.commands.train_args import TEXT_WORD, TYRO_MARKERS, parse_train_args, run_training, validate_train_config
from agents.core.config import check_minibatch_split
from agents.core.update import NonFiniteLossError
from agents.runs.checkpoint import CheckpointError
from agents.runs.config import read_config
from agents.text.config import TextTrainConfig
from agents.walkers.config import TrainConfig


def without_nproc(arguments: list[str]) -> list[str]:
    """``arguments`` less ``--nproc N`` / ``--nproc=N`` (torchrun's parser would take it for its own option)."""
    kept, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == "--nproc":
            skip = True
        elif not argument.startswith("--nproc="):
            kept.append(argument)
    return kept


def launch_processes(nproc: int, arguments: list[str]) -> int:
    """Hand ``ppo ARGUMENTS`` to torchrun's own launcher: ``nproc`` processes on this machine (each process
    records the number in config.json)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    try:
        torchrun(["--standalone", "--nproc-per-node", str(nproc), "-m", "agents", *without_nproc(arguments)])
    except ChildFailedError:
        print("error: a process of the run failed; its error is above", file=sys.stderr)
        return 1
    return 0


def train_cli(config: TrainConfig | TextTrainConfig, arguments: list[str]) -> int:
    """Train in this process, or first start the run's processes (``--nproc N``, or a resumed run of N)."""
    nproc = config.run.nproc
    if config.run.resume is not None:
        nproc = read_config(config.run.resume).get("run", {}).get("nproc", 1)
    if nproc > 1 and "LOCAL_RANK" not in os.environ:  # not yet one of torchrun's processes
        if config.run.resume is None:  # one line here rather than one from every process
            validate_train_config(config)
            check_minibatch_split(config.ppo.minibatch_size, nproc)
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, set here so that it does not warn
        return launch_processes(nproc, arguments)
    run_dir = run_training(config)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, the first process speaks for the run
        print(f"run written to {run_dir}")
    return 0


def main() -> None:
    arguments = sys.argv[1:]
    if arguments[:1] == ["train"]:
        config = parse_train_args(arguments[1:])
        handler = functools.partial(train_cli, arguments=arguments)
    else:
        commands = {
            "train": (TrainConfig, None),  # parsed above; listed for --help
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
