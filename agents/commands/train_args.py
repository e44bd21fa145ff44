"""The one parser of ``ppo train [text] ...``, used by the ``ppo`` command and by ``ppo compare`` for its cells."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import tyro

from agents.runs.session import shutdown_distributed
from agents.text.config import TextTrainConfig, validate_text_config
from agents.walkers.config import MujocoEnvConfig, TrainConfig, preset_config, validate_config

TYRO_MARKERS = (tyro.conf.OmitArgPrefixes, tyro.conf.OmitSubcommandPrefixes)
"""Flat option names (``--clip-coef``, not ``--objective.clip-coef``) and subcommands without prefixes."""
TEXT_WORD = "text"
"""The one word after ``ppo train`` that switches from walkers to language models."""


def parse_train_args(args: Sequence[str]) -> TrainConfig | TextTrainConfig:
    """The config of ``ppo train ARGS``: a walker config, or a text config when ARGS start with ``text``."""
    args = list(args)
    if args[:1] == [TEXT_WORD]:
        return tyro.cli(TextTrainConfig, args=args[1:], prog="ppo train text", config=TYRO_MARKERS)
    return tyro.cli(TrainConfig, args=args, default=preset_defaults(args), prog="ppo train", config=TYRO_MARKERS)


def preset_defaults(args: Sequence[str]) -> TrainConfig:
    """The defaults that ARGS' ``--preset`` chooses for their ``--env-id``; tyro then parses ARGS over them, so an
    option given on the command line overrides the preset's value and every other one keeps it."""
    parser = argparse.ArgumentParser(prog="ppo train", add_help=False, allow_abbrev=False)
    parser.add_argument("--preset", default=TrainConfig.preset)
    parser.add_argument("--env-id", default=MujocoEnvConfig.env_id)
    known, _ = parser.parse_known_args(args)
    return preset_config(known.preset, known.env_id)


def validate_train_config(config: TrainConfig | TextTrainConfig) -> None:
    """``ConfigError`` for the first impossible value of either kind of config."""
    if isinstance(config, TextTrainConfig):
        validate_text_config(config)
    else:
        validate_config(config)


def run_training(config: TrainConfig | TextTrainConfig) -> Path:
    """Train as ``config`` says, in its world (one process, or one of torchrun's); returns the run folder."""
    finished = False
    try:
        if isinstance(config, TextTrainConfig):
            from agents.text.train import train_text  # imported here: walker runs need no language-model stack

            run_dir = train_text(config)
        else:
            from agents.walkers.train import train

            run_dir = train(config)
        finished = True
        return run_dir
    finally:
        shutdown_distributed(finished)
