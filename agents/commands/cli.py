"""The ``ppo`` console script: ``ppo train [text]``, ``ppo eval``, ``ppo compare`` and ``ppo report``,
parsed by tyro.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import time
from pathlib import Path

import torch.distributed as dist
import tyro

from agents.commands.compare import CompareConfig, compare_cli
from agents.commands.evaluate import EvalConfig, evaluate_cli
from agents.commands.report import ReportConfig, report_cli
from agents.commands.train_args import TEXT_WORD, TYRO_MARKERS, parse_train_args, run_training, validate_train_config
from agents.core.config import check_minibatch_split
from agents.core.update import NonFiniteLossError
from agents.runs.checkpoint import CheckpointError, checkpoint_iteration, checkpoint_path
from agents.runs.config import CONFIG_FILE, read_config
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


LAUNCHED_HERE = "PPO_LAUNCHED_BY_NPROC"
"""Set for the processes ``--nproc`` starts: the launcher, not each process, then says why the run stopped."""
LOST_PEER_SIGNS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Connection refused")
"""How gloo's and the TCP store's errors read when another process of the run has gone."""


def lost_peer(error: BaseException) -> bool:
    """Whether a process's error is a collective failing because another process of the run is gone."""
    return isinstance(error, dist.DistError) or any(sign in str(error) for sign in LOST_PEER_SIGNS)


def run_folder(config: TrainConfig | TextTrainConfig, since: float) -> Path | None:
    """The folder of the run ``config`` starts or resumes: ``--resume``'s, ``--run-name``'s, or the newest run folder
    under ``--runs-dir`` written since ``since`` (a name with a timestamp); None if there is none yet."""
    if config.run.resume is not None:
        return Path(config.run.resume)
    runs_dir = Path(config.run.runs_dir)
    if config.run.run_name:
        return runs_dir / config.run.run_name
    written = [path.parent for path in runs_dir.glob(f"*/{CONFIG_FILE}") if path.stat().st_mtime >= since]
    return max(written, key=lambda folder: (folder / CONFIG_FILE).stat().st_mtime, default=None)


class StoppedByLauncher(Exception):
    """torchrun sent this process SIGTERM: it stops every process of a run when one dies (or when it is stopped)."""


def raise_stopped_by_launcher(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the stop's own line must not be cut by a second one
    raise StoppedByLauncher


def this_process() -> str:
    """``process RANK of WORLD_SIZE``, from torchrun's environment."""
    return f"process {os.environ['RANK']} of {os.environ.get('WORLD_SIZE', '?')}"


def stopped_run_line(what: str, config: TrainConfig | TextTrainConfig, since: float) -> str:
    """``error: WHAT, so the run stopped; its last checkpoint is iteration K (path): resume with ...``."""
    folder = run_folder(config, since)
    iteration = checkpoint_iteration(folder) if folder is not None else None
    if iteration is None:
        return f"error: {what}, so the run stopped before its first checkpoint; start it again"
    return (
        f"error: {what}, so the run stopped; its last checkpoint is iteration {iteration} "
        f"({checkpoint_path(folder)}): resume with `ppo train --resume {folder}`"
    )


def launch_processes(nproc: int, arguments: list[str], config: TrainConfig | TextTrainConfig) -> int:
    """Hand ``ppo ARGUMENTS`` to torchrun's own launcher: ``nproc`` processes on this machine (each process
    records the number in config.json). If one of them fails or dies, the others stop quietly and this one line
    says which it was, how, and how to resume."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)  # its per-process lines: ours instead
    os.environ[LAUNCHED_HERE] = "1"
    started = time.time()
    try:
        torchrun(["--standalone", "--nproc-per-node", str(nproc), "-m", "agents", *without_nproc(arguments)])
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        if failure.exitcode < 0:
            what = f"process {rank} of {nproc} was killed ({failure.signal_name()})"
        else:
            what = f"process {rank} of {nproc} failed with exit code {failure.exitcode} (its error is above)"
        print(stopped_run_line(what, config, started), file=sys.stderr)
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
        return launch_processes(nproc, arguments, config)
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
    started = time.time()
    if "RANK" in os.environ and not os.environ.get(LAUNCHED_HERE):
        # a peer that dies first costs the others torchrun's SIGTERM, often before a collective fails (a busy machine)
        signal.signal(signal.SIGTERM, raise_stopped_by_launcher)
    try:
        status = handler(config)
    except NonFiniteLossError as error:
        sys.exit(f"error: {error} (the last checkpoint was left as it was)")
    except RuntimeError as error:
        if "RANK" not in os.environ or not lost_peer(error):
            raise
        if os.environ.get(LAUNCHED_HERE):  # the launcher says which process went
            sys.exit(1)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # torchrun's SIGTERM may follow: this line says it already
        what = f"{this_process()} lost its connection to another process of the run, which died or stopped"
        sys.exit(stopped_run_line(what, config, started))
    except StoppedByLauncher:
        what = f"{this_process()} was stopped by torchrun (another process died, or torchrun was stopped)"
        sys.exit(stopped_run_line(what, config, started))
    except (ValueError, FileNotFoundError, CheckpointError) as error:
        sys.exit(f"error: {error}")
    sys.exit(status or 0)


if __name__ == "__main__":
    main()
