"""The reasoning task: reasoning-gym questions as prompts, stable and disjoint splits, answers read from tags or the
first line and scored by the dataset's own checker, one-line errors for bad settings, the registry and the CLI."""

import json

import pytest

from agents.commands.train_args import parse_train_args
from envs.text.tasks import (
    TASK_CONFIGS,
    ReasoningTask,
    ReasoningTaskConfig,
    TaskError,
    checked_scores,
    extracted_answer,
    make_task,
)
from envs.text.tasks import reasoning as reasoning_module

# The default and the second dataset docs/text_tasks.md recommends, each with its measured options.
SHIPPED = [
    ReasoningTaskConfig(),
    ReasoningTaskConfig(dataset="ransom_note", dataset_options='{"max_note_length": 5, "max_magazine_length": 10}'),
]
OPPOSITE = {"Yes": "No", "No": "Yes", "True": "False", "False": "True"}
FAST = dict(train_size=300, eval_size=100)


@pytest.fixture(scope="module", params=SHIPPED, ids=lambda config: config.dataset)
def shipped(request) -> ReasoningTask:
    return ReasoningTask(request.param)


def one_line_error(config: ReasoningTaskConfig) -> str:
    with pytest.raises(TaskError) as caught:
        ReasoningTask(config)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------- prompts


def test_prompts_are_stable_for_a_seed_and_change_with_it():
    config = ReasoningTaskConfig(dataset="letter_counting", **FAST)
    first, again = ReasoningTask(config), ReasoningTask(config)
    other = ReasoningTask(ReasoningTaskConfig(dataset="letter_counting", question_seed=1, **FAST))
    for split in ("train", "eval"):
        assert first.prompts(split) == again.prompts(split)
        assert first.prompts(split) != other.prompts(split)
    assert first.prompts("train")[0].startswith('How many times does the letter "')


def test_splits_are_disjoint_duplicate_free_and_sized(shipped):
    train, held_out = shipped.prompts("train"), shipped.prompts("eval")
    assert len(set(train)) == len(train) and len(set(held_out)) == len(held_out)
    assert not set(train) & set(held_out)
    assert 0.9 * shipped.config.train_size <= len(train) <= shipped.config.train_size
    assert 0.9 * shipped.config.eval_size <= len(held_out) <= shipped.config.eval_size


def test_small_question_spaces_drop_held_out_questions_seen_in_training():
    # 1-digit sums of 2 terms: 10 x 10 x 2 = 200 distinct questions, so most held-out questions are training ones
    task = make_task("reasoning", dataset="chain_sum", dataset_options='{"max_terms": 2, "max_digits": 1}', **FAST)
    train, held_out = task.prompts("train"), task.prompts("eval")
    assert len(train) < FAST["train_size"] and len(held_out) < FAST["eval_size"]
    assert held_out and not set(train) & set(held_out)


def test_a_dataset_without_options_gets_its_tuned_ones_and_explicit_options_win():
    def yes_share(task: ReasoningTask) -> float:
        held_out = task.prompts("eval")
        return sum(task.entry(prompt)["answer"] == "Yes" for prompt in held_out) / len(held_out)

    assert 0.4 <= yes_share(ReasoningTask()) <= 0.6  # TUNED_OPTIONS: invalid_ratio 0.5
    assert yes_share(ReasoningTask(ReasoningTaskConfig(dataset_options="{}"))) > 0.6  # reasoning-gym's default: 0.3
    notes = ReasoningTask(ReasoningTaskConfig(dataset="ransom_note", **FAST)).prompts("eval")
    assert all(len(prompt.split("Ransom note: ")[1].split("\n")[0]) <= 5 for prompt in notes)


@pytest.mark.parametrize(
    ("prompt_format", "suffix"),
    [
        ("question", "="),
        ("answer", "=\nAnswer:"),
        ("tags", "=\nGive only the answer, between <answer> and </answer> tags."),
    ],
)
def test_prompt_format_decides_what_follows_the_question(prompt_format, suffix):
    task = ReasoningTask(ReasoningTaskConfig(dataset="chain_sum", dataset_options="{}", prompt_format=prompt_format))
    prompt = task.prompts("eval")[0]
    assert prompt.startswith("State the final answer to the following arithmetic problem: ")
    assert prompt.endswith(suffix)


# ---------------------------------------------------------------- scores


def test_answers_are_read_from_the_last_tags_else_the_first_line():
    assert extracted_answer("<answer>12</answer>") == "12"
    assert extracted_answer("I think <answer> 3 </answer> no, <answer>4</answer>.") == "4"
    assert extracted_answer(" 12\nQuestion: what is 2 + 2?") == "12"
    assert extracted_answer("\n\n  sun \n") == "sun"
    assert extracted_answer("<answer>12") == "12"
    assert (
        extracted_answer("") is None
        and extracted_answer(" \n ") is None
        and extracted_answer("<answer></answer>") is None
    )


def test_a_correct_answer_scores_1_and_a_wrong_one_0(shipped):
    prompts = shipped.prompts("eval")[:20] + shipped.prompts("train")[:20]
    answers = [shipped.entry(prompt)["answer"] for prompt in prompts]
    for written in (" {}", "{}\nQuestion: next", "<answer>{}</answer>", "Let me see. <answer>{}</answer>"):
        scores = checked_scores(shipped, prompts, [written.format(answer) for answer in answers])
        assert scores.rewards == [1.0] * len(prompts)
        assert scores.metrics == {"accuracy": [1.0] * len(prompts), "answered": [1.0] * len(prompts)}
    wrong = [OPPOSITE[answer] for answer in answers]
    for written in (" {}", "<answer>{}</answer>"):
        scores = checked_scores(shipped, prompts, [written.format(answer) for answer in wrong])
        assert scores.rewards == [0.0] * len(prompts)
        assert scores.metrics == {"accuracy": [0.0] * len(prompts), "answered": [1.0] * len(prompts)}
    nothing = checked_scores(shipped, prompts[:2], ["", "\n"])
    assert nothing.rewards == [0.0, 0.0] and nothing.metrics["answered"] == [0.0, 0.0]


def test_scores_are_stable():
    task = ReasoningTask()
    prompts = task.prompts("eval")[:16]
    completions = [f" {index}" for index in range(16)]
    assert task.score(prompts, completions) == task.score(prompts, completions)


def test_partial_credit_is_a_reward_but_not_accuracy():
    task = ReasoningTask()
    prompt = next(prompt for prompt in task.prompts("eval") if task.entry(prompt)["answer"] == "Yes")
    # reasoning-gym's default checker: the right answer inside a longer one earns len(right) / len(written)
    scores = task.score([prompt, prompt], [" Yes.", " yes"])
    assert scores.rewards == [0.75, 0.0] and scores.metrics["accuracy"] == [0.0, 0.0]


def test_a_prompt_the_task_did_not_make_is_a_one_line_error():
    task = ReasoningTask()
    with pytest.raises(TaskError, match="is not one of this task's questions") as caught:
        task.score(["What is the meaning of life?"], ["42"])
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(dataset="chain_summ"), "unknown reasoning-gym dataset 'chain_summ'; did you mean chain_sum"),
        (dict(dataset="poetry"), "unknown reasoning-gym dataset 'poetry'; e.g. chain_sum"),
        (dict(dataset_options="{max_terms: 2}"), "dataset_options '{max_terms: 2}' is not valid JSON"),
        (dict(dataset_options="[2]"), "dataset_options must be a JSON object"),
        (
            dict(dataset_options='{"max_term": 2}'),
            "the chain_sum dataset has no option 'max_term'; its options: min_terms",
        ),
        (dict(dataset_options='{"seed": 2}'), "dataset_options may not set seed; use the task's question_seed"),
        (dict(dataset_options='{"max_terms": 0}'), "reasoning-gym could not build chain_sum"),
        (dict(dataset_options='{"max_digits": "two"}'), "reasoning-gym could not build chain_sum"),
        (dict(train_size=0), "train_size and eval_size must be at least 1, got 0 and 200"),
        (dict(eval_size=-1), "train_size and eval_size must be at least 1, got 2000 and -1"),
        (dict(prompt_format="chat"), "prompt_format must be one of question, answer, tags"),
        (
            dict(dataset="chain_sum", dataset_options='{"max_terms": 2, "max_digits": 1}'),
            "all 200 held-out questions of chain_sum are also training questions",
        ),
    ],
)
def test_bad_settings_give_one_line_errors(options, message):
    assert message in one_line_error(ReasoningTaskConfig(**{"dataset": "chain_sum", **options}))


def test_listing_the_datasets_as_the_error_says_works():
    command = reasoning_module.LIST_DATASETS
    assert "DATASETS" in command
    from reasoning_gym.factory import DATASETS

    assert {"chain_sum", "letter_counting", "spell_backward"} <= set(DATASETS)


def test_a_dataset_that_needs_the_network_is_a_one_line_error(monkeypatch):
    real = reasoning_module.reasoning_gym_datasets()
    _, config_class = real["chain_sum"]

    class DownloadingDataset:
        def __init__(self, config):
            raise ConnectionError("Failed to resolve 'huggingface.co'\n(network unreachable)")

    monkeypatch.setattr(
        reasoning_module, "reasoning_gym_datasets", lambda: {**real, "chain_sum": (DownloadingDataset, config_class)}
    )
    message = one_line_error(ReasoningTaskConfig(dataset="chain_sum"))
    assert "the chain_sum dataset could not be built offline (ConnectionError" in message
    assert "pick another dataset" in message


# ---------------------------------------------------------------- registry and command line


def test_the_registry_builds_the_task():
    assert TASK_CONFIGS["reasoning"] is ReasoningTaskConfig
    task = make_task("reasoning", dataset="spell_backward", dataset_options=json.dumps({"max_word_len": 5}), **FAST)
    assert task.name == "reasoning" and task.prompts("eval")[0].startswith("Spell this word backward")


def test_the_command_line_parses_the_task_and_its_options():
    config = parse_train_args(
        ["text", "--seed", "3", "reasoning", "--dataset", "chain_sum", "--dataset-options", '{"max_terms": 3}']
        + ["--prompt-format", "tags", "--eval-size", "50", "--question-seed", "7", "grpo"]
    )
    assert config.text.task == ReasoningTaskConfig(
        dataset="chain_sum", dataset_options='{"max_terms": 3}', prompt_format="tags", eval_size=50, question_seed=7
    )
    assert config.run.seed == 3 and config.objective.name == "grpo"
    assert parse_train_args(["text", "reasoning", "--dataset", "chain_sum"]).text.task == ReasoningTaskConfig(
        dataset="chain_sum"
    )
