"""The reasoning task, RL with verifiable rewards from ``reasoning-gym``: one of its procedural generators (chain
sums, letter counting, spelling backward, ...) writes the questions, training ones from ``question_seed`` and held-out
ones from a seed far from it, and the dataset's own checker, ``dataset.score_answer``, scores the answer read from each
completion (inside ``<answer>`` tags if there are any, else its first line).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, NamedTuple

from envs.text.tasks.base import TaskError, TaskScores, check_split

PromptFormat = Literal["question", "answer", "tags"]
PROMPT_SUFFIXES: dict[str, str] = {
    "question": "",
    "answer": "\nAnswer:",
    # reasoning-gym's "direct" system prompt (reasoning_gym/utils.py SYSTEM_PROMPTS), cut to the answer format
    "tags": "\nGive only the answer, between <answer> and </answer> tags.",
}
# reasoning-gym draws entry i from Random(seed + i) (e.g. arithmetic/chain_sum.py): held-out seeds start this far away
HELDOUT_SEED_OFFSET = 1_000_000_000
# dataset_options used when none are given: where SmolLM2-135M-Instruct's pass@1 is 0.15-0.6 (docs/text_tasks.md)
TUNED_OPTIONS: dict[str, dict[str, Any]] = {
    "syllogism": {"invalid_ratio": 0.5},
    "ransom_note": {"max_note_length": 5, "max_magazine_length": 10},
}
ANSWER_TAG = re.compile(r"</?answer>")
TASK_OWNED_OPTIONS = ("seed", "size")
LIST_DATASETS = "python -c 'from reasoning_gym.factory import DATASETS; print(sorted(DATASETS))'"


@dataclass(frozen=True)
class ReasoningTaskConfig:
    """Answer questions of a reasoning-gym dataset; reward = the dataset's own score of the answer, in [0, 1]."""

    name: ClassVar[str] = "reasoning"
    dataset: str = "syllogism"
    """reasoning-gym dataset name, e.g. syllogism, ransom_note, chain_sum, letter_counting, spell_backward."""
    dataset_options: str | None = None
    """The dataset's config as a JSON object, e.g. '{"max_digits": 2}'; default: its TUNED_OPTIONS entry, else {}."""
    prompt_format: PromptFormat = "answer"
    """After the question: nothing ('question'), a line 'Answer:' ('answer') or a request for <answer> tags ('tags')."""
    train_size: int = 2000
    """Questions generated for training (duplicates and questions held out are dropped, so maybe fewer prompts)."""
    eval_size: int = 200
    """Questions generated for evaluation (questions also among the training ones are dropped)."""
    question_seed: int = 0
    """Seed of the training questions; the held-out ones come from question_seed + 1,000,000,000."""


def reasoning_gym_datasets() -> dict[str, tuple[type, type]]:
    """reasoning-gym's registry, ``name -> (dataset class, config dataclass)``."""
    # Imported here, not at the top: reasoning-gym takes about 0.7 s to import and only this task needs it.
    from reasoning_gym.factory import DATASETS

    return DATASETS


def dataset_options_text(config: ReasoningTaskConfig) -> str:
    """``config.dataset_options``, or when it is None the dataset's ``TUNED_OPTIONS`` (``{}`` for the others)."""
    if config.dataset_options is None:
        return json.dumps(TUNED_OPTIONS.get(config.dataset, {}))
    return config.dataset_options


def dataset_options(config: ReasoningTaskConfig, config_class: type) -> dict[str, Any]:
    """The dataset's options (``dataset_options_text``) parsed, checked against its config dataclass's fields."""
    text = dataset_options_text(config)
    try:
        options = json.loads(text)
    except ValueError as error:
        raise TaskError(
            f"dataset_options {text!r} is not valid JSON ({error}); "
            """write a JSON object such as '{"max_digits": 2}'"""
        ) from None
    if not isinstance(options, dict):
        raise TaskError(f"dataset_options must be a JSON object such as '{{\"max_digits\": 2}}', got {options!r}")
    owned = [name for name in TASK_OWNED_OPTIONS if name in options]
    if owned:
        raise TaskError(
            f"dataset_options may not set {' or '.join(owned)}; use the task's question_seed, train_size and eval_size"
        )
    known = [field.name for field in fields(config_class) if field.name not in TASK_OWNED_OPTIONS]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TaskError(
            f"the {config.dataset} dataset has no option {', '.join(map(repr, unknown))}; "
            f"its options: {', '.join(known)}"
        )
    return options


class GeneratedQuestions(NamedTuple):
    """Entries of a reasoning-gym dataset and the dataset that checks answers to them."""

    dataset: Any
    """The reasoning-gym ``ProceduralDataset``; its ``score_answer(answer, entry)`` scores an answer in [0, 1]."""
    entries: list[dict[str, Any]]
    """Generated entries, each with ``question``, ``answer`` and ``metadata``."""


def generated_questions(config: ReasoningTaskConfig, seed: int, size: int) -> GeneratedQuestions:
    """``size`` entries of ``config.dataset`` generated from ``seed``, and the dataset that made them."""
    datasets = reasoning_gym_datasets()
    if config.dataset not in datasets:
        close = difflib.get_close_matches(config.dataset, datasets, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else "e.g. chain_sum, letter_counting, spell_backward; "
        raise TaskError(f"unknown reasoning-gym dataset {config.dataset!r}; {hint}list them all with: {LIST_DATASETS}")
    dataset_class, config_class = datasets[config.dataset]
    options = dataset_options(config, config_class)
    try:
        dataset = dataset_class(config=config_class(seed=seed, size=size, **options))
        return GeneratedQuestions(dataset, list(dataset))
    except OSError as error:
        raise TaskError(
            f"the {config.dataset} dataset could not be built offline ({type(error).__name__}: {one_line(error)}); "
            "this task must run without network, so pick another dataset"
        ) from None
    except Exception as error:  # noqa: BLE001 - a generator may reject options with anything (often AssertionError)
        raise TaskError(
            f"reasoning-gym could not build {config.dataset} with dataset_options {dataset_options_text(config)} "
            f"({type(error).__name__}: {one_line(error)}); fix dataset_options"
        ) from None


def one_line(error: Exception) -> str:
    """``error``'s message with its whitespace runs, newlines included, collapsed to single spaces."""
    return " ".join(str(error).split()) or "no message"


def extracted_answer(completion: str) -> str | None:
    """The answer written in ``completion``: inside its last ``<answer>...</answer>`` pair, else its first non-blank
    line with any stray answer tag removed, stripped; None when that is empty."""
    from reasoning_gym.utils import extract_answer  # reasoning-gym's own reader: the last tagged answer, stripped

    tagged = extract_answer(completion)
    if tagged is not None:
        return tagged or None
    # Without tags extract_answer gives None, scored 0; a 135M model rarely writes tags, and 'Answer:' prompts
    # (as in this project's arithmetic task) get the answer on the first line, so that line is the answer.
    lines = [line.strip() for line in ANSWER_TAG.sub("", completion).splitlines() if line.strip()]
    return lines[0] if lines else None


def prompt_entries(entries: list[dict[str, Any]], prompt_format: str) -> dict[str, dict[str, Any]]:
    """Each entry under its prompt (question + ``prompt_format``'s suffix), in generation order; an entry whose
    prompt came earlier is dropped."""
    prompts: dict[str, dict[str, Any]] = {}
    for entry in entries:
        prompts.setdefault(entry["question"].rstrip() + PROMPT_SUFFIXES[prompt_format], entry)
    return prompts


class ReasoningTask:
    """RL with a verifiable reward: a reasoning-gym generator writes the questions and its checker scores them.

    Prompts: the question of each generated entry plus the ``prompt_format`` suffix; "train" from
    ``train_size`` entries of ``question_seed``, "eval" from ``eval_size`` entries of ``question_seed +
    HELDOUT_SEED_OFFSET``, without duplicates and without held-out questions that are also training
    questions (disjoint).
    Scores: the answer is read from the completion (``extracted_answer``); ``reward =
    dataset.score_answer(answer, entry)``, 1 for a right answer (some datasets give partial credit below 1);
    ``accuracy = 1`` if the reward is 1, else 0; ``answered = 1`` if an answer was read.
    """

    name = ReasoningTaskConfig.name

    def __init__(self, config: ReasoningTaskConfig = ReasoningTaskConfig()) -> None:
        if config.train_size < 1 or config.eval_size < 1:
            raise TaskError(
                f"train_size and eval_size must be at least 1, got {config.train_size} and {config.eval_size}"
            )
        if config.prompt_format not in PROMPT_SUFFIXES:
            raise TaskError(f"prompt_format must be one of {', '.join(PROMPT_SUFFIXES)}, got {config.prompt_format!r}")
        train = generated_questions(config, config.question_seed, config.train_size)
        held_out = generated_questions(config, config.question_seed + HELDOUT_SEED_OFFSET, config.eval_size)
        train_prompts = prompt_entries(train.entries, config.prompt_format)
        heldout_prompts = {
            prompt: entry
            for prompt, entry in prompt_entries(held_out.entries, config.prompt_format).items()
            if prompt not in train_prompts
        }
        if not heldout_prompts:
            raise TaskError(
                f"all {config.eval_size} held-out questions of {config.dataset} are also training questions; "
                "widen dataset_options or lower train_size"
            )
        self.config = config
        self.dataset = train.dataset  # its checker depends on the options, not the seed: it scores both splits
        self.split_prompts = {"train": list(train_prompts), "eval": list(heldout_prompts)}
        self.entries = {**train_prompts, **heldout_prompts}

    def entry(self, prompt: str) -> dict[str, Any]:
        """The reasoning-gym entry (``question``, ``answer``, ``metadata``) ``prompt`` was made from."""
        if prompt not in self.entries:
            raise TaskError(
                f"prompt {prompt[:60]!r} is not one of this task's questions; "
                "score only prompts from ReasoningTask.prompts"
            )
        return self.entries[prompt]

    def prompts(self, split: str) -> list[str]:
        check_split(split)
        return list(self.split_prompts[split])

    def score(self, prompts: list[str], completions: list[str]) -> TaskScores:
        answers = [extracted_answer(completion) for completion in completions]
        rewards = [
            float(self.dataset.score_answer(answer, self.entry(prompt))) for prompt, answer in zip(prompts, answers)
        ]
        accuracy = [float(reward == 1.0) for reward in rewards]
        answered = [float(answer is not None) for answer in answers]
        return TaskScores(rewards=rewards, metrics={"accuracy": accuracy, "answered": answered})
