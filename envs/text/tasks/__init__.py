"""Prompt sources and reward functions for text generation: one ``Task`` protocol (``base``) and four tasks,
``sentiment`` (make an IMDB review opening continue positively; learned reward, lexicon "gold" check),
``arithmetic`` (exact answers to small sums, checked by a program), ``reasoning`` (a reasoning-gym dataset's
questions, scored by its own checker) and ``custom`` (prompts from a file, reward from ``module:function``). This
package holds ``TASK_CONFIGS``, the one table of task names, and the factories ``task_from_config`` and
``make_task``, and re-exports the names code outside imports. Everything runs offline: data and models are read from
installed packages and the trained reward head is cached under ``PPO_CACHE_DIR``.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

from envs.text.tasks.arithmetic import ArithmeticTask, ArithmeticTaskConfig, arithmetic_answer, arithmetic_question
from envs.text.tasks.base import RewardError, Task, TaskError, TaskScores, checked_scores, default_cache_dir
from envs.text.tasks.custom import CustomTask, CustomTaskConfig
from envs.text.tasks.reasoning import ReasoningTask, ReasoningTaskConfig, extracted_answer
from envs.text.tasks.sentiment import (
    CACHE_FILE,
    SentimentTask,
    SentimentTaskConfig,
    clean_review,
    imdb_prompts,
    imdb_reviews,
    imdb_split,
)

TaskConfig = SentimentTaskConfig | ArithmeticTaskConfig | CustomTaskConfig | ReasoningTaskConfig
TASK_CONFIGS: dict[str, type] = {
    cls.name: cls for cls in (SentimentTaskConfig, ArithmeticTaskConfig, CustomTaskConfig, ReasoningTaskConfig)
}
"""Every task's config class under the task's name: the one table of task names."""
TASK_CLASSES: dict[type, type] = {
    SentimentTaskConfig: SentimentTask,
    ArithmeticTaskConfig: ArithmeticTask,
    CustomTaskConfig: CustomTask,
    ReasoningTaskConfig: ReasoningTask,
}
"""The task class each config class builds."""


def task_from_config(config: TaskConfig) -> Task:
    """The task a config describes."""
    if type(config) not in TASK_CLASSES:
        known = ", ".join(config_class.__name__ for config_class in TASK_CONFIGS.values())
        raise TaskError(f"{type(config).__name__} is not a task config; use one of {known}")
    return TASK_CLASSES[type(config)](config)


def make_task(name: str, **options) -> Task:
    """``make_task("arithmetic", operand_max=50)``: the named task with its config fields set from ``options``."""
    if name not in TASK_CONFIGS:
        raise TaskError(f"unknown task {name!r}; known tasks: {', '.join(TASK_CONFIGS)}")
    config_class = TASK_CONFIGS[name]
    field_names = [f.name for f in fields(config_class)]
    unknown = sorted(set(options) - set(field_names))
    if unknown:
        raise TaskError(
            f"the {name} task has no option {', '.join(map(repr, unknown))}; its options: {', '.join(field_names)}"
        )
    missing = [
        f.name
        for f in fields(config_class)
        if f.name not in options and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise TaskError(f"the {name} task needs {' and '.join(missing)}")
    return task_from_config(config_class(**options))


__all__ = [
    "CACHE_FILE",
    "TASK_CLASSES",
    "TASK_CONFIGS",
    "ArithmeticTask",
    "ArithmeticTaskConfig",
    "CustomTask",
    "CustomTaskConfig",
    "ReasoningTask",
    "ReasoningTaskConfig",
    "RewardError",
    "SentimentTask",
    "SentimentTaskConfig",
    "Task",
    "TaskConfig",
    "TaskError",
    "TaskScores",
    "arithmetic_answer",
    "arithmetic_question",
    "checked_scores",
    "clean_review",
    "default_cache_dir",
    "extracted_answer",
    "imdb_prompts",
    "imdb_reviews",
    "imdb_split",
    "make_task",
    "task_from_config",
]
