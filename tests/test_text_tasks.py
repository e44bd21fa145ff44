"""Text tasks: IMDB prompts, the learned and lexicon sentiment rewards and their cache, exact arithmetic
rewards, custom prompt files and reward functions, and the checks on what a reward returns."""

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from envs.text import tasks
from envs.text.tasks import (
    ArithmeticTask,
    ArithmeticTaskConfig,
    CustomTask,
    CustomTaskConfig,
    RewardError,
    SentimentTask,
    SentimentTaskConfig,
    TaskError,
    TaskScores,
    checked_scores,
    make_task,
    minilm,
)
from envs.text.tasks import sentiment as sentiment_module
from envs.text.tasks.base import settings_fingerprint, write_atomically

POSITIVE = "This movie was wonderful, brilliant and moving."
NEGATIVE = "This movie was awful, boring and a waste of time."
# Small enough to train in seconds, large enough for a real classifier: measured 0.73 held-out accuracy.
SMALL_HEAD = dict(train_reviews=500, heldout_reviews=300, review_tokens=64)


@pytest.fixture(scope="module")
def sentiment_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ppo-cache")


@pytest.fixture(scope="module")
def sentiment(sentiment_cache) -> SentimentTask:
    """A sentiment task whose reward head is trained once for this module, in a temporary cache."""
    return SentimentTask(SentimentTaskConfig(cache_dir=sentiment_cache, **SMALL_HEAD))


# ---------------------------------------------------------------- sentiment prompts


def test_review_cleaning_removes_tags_and_collapses_whitespace():
    assert tasks.clean_review("Great.<br /><br />Really <i>great</i>  film\n") == "Great. Really great film"


def test_sentiment_prompts_are_clean_openings_of_the_requested_length(sentiment):
    for split in ("train", "eval"):
        prompts = sentiment.prompts(split)
        assert len(prompts) > 1000
        assert all(len(prompt.split()) == 8 for prompt in prompts)
        assert not any("<" in prompt and ">" in prompt for prompt in prompts)
        assert all(prompt == " ".join(prompt.split()) for prompt in prompts)


def test_sentiment_prompts_are_deterministic_and_splits_disjoint(sentiment, sentiment_cache):
    train, held_out = sentiment.prompts("train"), sentiment.prompts("eval")
    assert not set(train) & set(held_out)
    tasks.imdb_reviews.cache_clear()
    tasks.imdb_prompts.cache_clear()
    again = SentimentTask(SentimentTaskConfig(cache_dir=sentiment_cache, **SMALL_HEAD))
    assert again.prompts("train") == train and again.prompts("eval") == held_out
    opening = tasks.imdb_split("eval")[0].text.split()
    assert held_out[0] == " ".join(opening[:8])


def test_prompt_words_sets_the_prompt_length(sentiment_cache):
    task = SentimentTask(SentimentTaskConfig(prompt_words=3, cache_dir=sentiment_cache, **SMALL_HEAD))
    assert task.reward_model_report().from_cache  # the head does not depend on the prompt length
    assert {len(prompt.split()) for prompt in task.prompts("train")} == {3}


def test_unknown_split_and_bad_settings_are_rejected(sentiment, sentiment_cache):
    with pytest.raises(TaskError, match="use 'train' or 'eval'"):
        sentiment.prompts("test")
    with pytest.raises(TaskError, match="prompt_words must be at least 1"):
        SentimentTask(SentimentTaskConfig(prompt_words=0, cache_dir=sentiment_cache))
    with pytest.raises(TaskError, match="heldout_reviews must be between 1 and 5000"):
        SentimentTask(SentimentTaskConfig(heldout_reviews=6000, cache_dir=sentiment_cache))


# ---------------------------------------------------------------- sentiment rewards


def test_learned_reward_ranks_positive_above_negative(sentiment):
    scores = sentiment.score(["", ""], [POSITIVE, NEGATIVE])
    assert scores.rewards == scores.metrics["learned_reward"]
    assert scores.rewards[0] > 0 > scores.rewards[1]
    assert scores.metrics["gold_lexicon"][0] > 0.5 > -0.5 > scores.metrics["gold_lexicon"][1]


def test_learned_reward_scores_prompt_and_completion_together(sentiment):
    prompt = "I expected to hate this film, but it was"
    together = sentiment.score([prompt], [" wonderful."]).metrics["learned_reward"][0]
    assert together == pytest.approx(sentiment.learned([prompt + " wonderful."])[0], abs=1e-5)
    assert together != pytest.approx(sentiment.learned([" wonderful."])[0], abs=1e-3)


def test_reward_head_reaches_reference_accuracy_and_reports_it(sentiment):
    # docs/text_tasks.md: a logistic head on MiniLM embeddings of 3,000 reviews reaches about 0.79 on IMDB; this one
    # learns from 500 (measured 0.73 on 300 held-out reviews); chance is 0.5
    report = sentiment.reward_model_report()
    assert 0.70 <= report.heldout_accuracy <= 0.85
    assert (report.train_reviews, report.heldout_reviews) == (500, 300)
    positive, negative = sentiment.score(["", ""], [POSITIVE, NEGATIVE]).rewards
    assert positive > 0 > negative


def test_lexicon_reward_is_the_gold_score_and_learned_is_still_logged(sentiment_cache):
    task = SentimentTask(SentimentTaskConfig(reward_model="lexicon", cache_dir=sentiment_cache, **SMALL_HEAD))
    scores = task.score(["The film", "The film"], [" was a joy, beautiful and funny.", " was dreadful and dull."])
    assert scores.rewards == scores.metrics["gold_lexicon"]
    assert scores.rewards[0] > 0.5 and scores.rewards[1] < -0.5
    assert scores.metrics["learned_reward"][0] > scores.metrics["learned_reward"][1]


def test_scoring_sixteen_completions_is_fast(sentiment):
    prompts = sentiment.prompts("eval")[:16]
    completions = [" and I thought the acting was superb, the story moving and the ending a delight."] * 16
    sentiment.score(prompts, completions)  # warm-up
    start = time.perf_counter()
    scores = checked_scores(sentiment, prompts, completions)
    assert time.perf_counter() - start < 1.5  # measured about 0.1 s on one thread
    assert len(scores.rewards) == 16


def test_reward_head_cache_is_reused_without_training(sentiment, sentiment_cache, monkeypatch):
    cache_file = sentiment_cache / tasks.CACHE_FILE
    mtime = cache_file.stat().st_mtime_ns

    def no_training(*args):
        raise AssertionError("the cached head should have been reused")

    monkeypatch.setattr(sentiment_module, "train_logistic_head", no_training)
    again = SentimentTask(SentimentTaskConfig(cache_dir=sentiment_cache, **SMALL_HEAD))
    assert again.reward_model_report().from_cache
    assert again.reward_model_report() == sentiment.reward_model_report()._replace(from_cache=True)
    assert cache_file.stat().st_mtime_ns == mtime
    assert again.score([""], [POSITIVE]).rewards == pytest.approx(sentiment.score([""], [POSITIVE]).rewards, abs=1e-6)


def test_reward_head_cache_is_retrained_when_the_settings_change(tmp_path, monkeypatch):
    tiny = SentimentTaskConfig(cache_dir=tmp_path, train_reviews=60, heldout_reviews=20, review_tokens=16)
    first = SentimentTask(tiny).reward_model_report()
    assert not first.from_cache and first.cache_file == tmp_path / tasks.CACHE_FILE
    stored = json.loads(first.cache_file.read_text())
    assert SentimentTask(tiny).reward_model_report().from_cache

    changed = SentimentTask(replace(tiny, train_reviews=80)).reward_model_report()
    assert not changed.from_cache and changed.train_reviews == 80
    overwritten = json.loads(first.cache_file.read_text())
    assert overwritten["fingerprint"] != stored["fingerprint"] and overwritten["train_reviews"] == 80
    assert list(tmp_path.iterdir()) == [first.cache_file]  # no temporary file left behind


def test_minilm_embeds_many_texts_as_it_embeds_each_alone_in_their_own_order(monkeypatch):
    encoder = minilm.MiniLMEncoder()
    texts = [POSITIVE, "Bad.", NEGATIVE * 3, "", "An ordinary film with one good scene in it.", POSITIVE * 2, "Fine"]
    monkeypatch.setattr(minilm, "ENCODER_BATCH", 3)  # three batches of sorted lengths, one of them short
    together = encoder.embed_many(texts, max_tokens=32)
    alone = torch.cat([encoder.embed([text], max_tokens=32) for text in texts])
    assert together.shape == (7, 384)
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(together.norm(dim=-1), torch.ones(7))
    assert encoder.embed_many([], max_tokens=32).shape == (0, 384)


def test_cache_directory_comes_from_the_environment_unless_given(tmp_path, monkeypatch):
    monkeypatch.setenv("PPO_CACHE_DIR", str(tmp_path / "from-env"))
    assert tasks.default_cache_dir() == tmp_path / "from-env"
    monkeypatch.delenv("PPO_CACHE_DIR")
    assert tasks.default_cache_dir() == Path.home() / ".cache" / "ppo-two-worlds"


def test_the_default_env_is_made_from_a_cached_head_without_training(sentiment, tmp_path, monkeypatch):
    # The module's small head filed under the defaults' fingerprint (training the default head costs 5 minutes), so
    # the registered id on its embedded defaults (SmolLM2's tokenizer, the sentiment task) is made without training.
    cached = json.loads(sentiment.reward_model_report().cache_file.read_text())
    default_settings = sentiment.learned.settings(SentimentTaskConfig())
    write_atomically(
        tmp_path / sentiment_module.CACHE_FILE,
        {**cached, "settings": default_settings, "fingerprint": settings_fingerprint(default_settings)},
    )
    import gymnasium as gym

    import envs.text  # noqa: F401 - registers ppo/TextGen-v0
    from tests.conftest import passes_gymnasium_and_sb3_checkers

    monkeypatch.setenv("PPO_CACHE_DIR", str(tmp_path))
    env = gym.make("ppo/TextGen-v0")
    passes_gymnasium_and_sb3_checkers(env)
    default_head = json.loads((tmp_path / sentiment_module.CACHE_FILE).read_text())
    assert default_head["train_reviews"] == 500  # read from the cache, not trained again
    assert env.unwrapped.prompts == sentiment.prompts("train") and env.action_space.n == 49152
    env.reset(seed=0, options={"prompt": sentiment.prompts("train")[0]})
    terminated, reward = False, 0.0
    for token in env.unwrapped.tokenizer(" " + POSITIVE, add_special_tokens=False)["input_ids"]:
        _, reward, terminated, _, _ = env.step(token)
    _, reward, terminated, _, info = env.step(env.unwrapped.tokenizer.eos_token_id)
    assert terminated and info["completion"] == " " + POSITIVE and reward > 0


# ---------------------------------------------------------------- arithmetic


def arithmetic_rewards(task, prompt, completions):
    return task.score([prompt] * len(completions), completions)


def test_arithmetic_rewards_the_exact_answer_only():
    task = ArithmeticTask()
    prompt = tasks.arithmetic_question(7, "+", 5)
    assert prompt == "What is 7 + 5? Answer:"
    scores = arithmetic_rewards(
        task, prompt, [" 12", "13", " The answer is 12.", "", " 12.0", " 12.5", " 1 2", " twelve", "-12"]
    )
    assert scores.rewards == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert scores.metrics["accuracy"] == scores.rewards
    assert scores.metrics["answered"] == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]


def test_arithmetic_negative_answers_and_products():
    task = ArithmeticTask(ArithmeticTaskConfig(operations="-*"))
    assert arithmetic_rewards(task, "What is 2 - 5? Answer:", [" -3", " 3", " \N{MINUS SIGN}3"]).rewards == [
        1.0,
        0.0,
        1.0,
    ]
    assert arithmetic_rewards(task, "What is 6 * 7? Answer:", [" 42", " 13"]).rewards == [1.0, 0.0]
    negative = tasks.arithmetic_question(4, "-", -3)
    assert negative == "What is 4 - (-3)? Answer:" and tasks.arithmetic_answer(negative) == 7


def test_arithmetic_finds_the_question_inside_a_chat_template():
    prompt = "<|im_start|>user\nWhat is 9 - 4? Answer:<|im_end|>\n<|im_start|>assistant\n"
    assert ArithmeticTask().score([prompt], ["5"]).rewards == [1.0]
    with pytest.raises(RewardError, match="holds no 'What is A op B\\?' question"):
        checked_scores(ArithmeticTask(), ["Tell me a story"], ["5"])


def test_arithmetic_prompts_are_deterministic_disjoint_and_correctly_answered():
    config = ArithmeticTaskConfig(operand_min=0, operand_max=9, operations="+-*", eval_prompts=30, question_seed=3)
    task = ArithmeticTask(config)
    train, held_out = task.prompts("train"), task.prompts("eval")
    assert len(held_out) == 30 and len(train) == 3 * 10 * 10 - 30
    assert not set(train) & set(held_out)
    assert ArithmeticTask(config).prompts("train") == train
    assert ArithmeticTask(replace(config, question_seed=4)).prompts("eval") != held_out
    for prompt in held_out:
        a, op, b = prompt.removeprefix("What is ").removesuffix("? Answer:").split()
        assert tasks.arithmetic_answer(prompt) == eval(f"{a} {op} {b}")


def test_arithmetic_bad_settings_are_rejected():
    with pytest.raises(TaskError, match="operations must be made of"):
        ArithmeticTask(ArithmeticTaskConfig(operations="/"))
    with pytest.raises(TaskError, match="must not exceed operand_max"):
        ArithmeticTask(ArithmeticTaskConfig(operand_min=5, operand_max=1))
    with pytest.raises(TaskError, match="eval_prompts must be between 1 and 7"):
        ArithmeticTask(ArithmeticTaskConfig(operand_min=0, operand_max=1, operations="+-", eval_prompts=8))


# ---------------------------------------------------------------- custom


@pytest.fixture
def reward_file(tmp_path) -> Path:
    path = tmp_path / "my_rewards.py"
    path.write_text(
        "def length(prompts, completions):\n"
        "    return [float(len(c)) for c in completions]\n"
        "def mentions_prompt(prompts, completions):\n"
        "    return [1 if p.split()[0] in c else 0 for p, c in zip(prompts, completions)]\n"
        "def explode(prompts, completions):\n"
        "    raise KeyError('no score for this')\n"
        "def nan(prompts, completions):\n"
        "    return [1.0, float('nan'), 2.0, float('inf')]\n"
        "def too_few(prompts, completions):\n"
        "    return [0.0]\n"
        "def word(prompts, completions):\n"
        "    return 'good'\n"
        "NOT_A_FUNCTION = 3\n"
    )
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_custom_task_reads_txt_prompts_and_calls_a_reward_file(tmp_path, reward_file):
    prompts_file = write(tmp_path / "prompts.txt", "Once upon a time\n\n  \nThe cat sat\n")
    task = CustomTask(CustomTaskConfig(prompts_file=prompts_file, reward=f"{reward_file}:length"))
    assert task.prompts("train") == ["Once upon a time", "The cat sat"] == task.prompts("eval")
    assert checked_scores(task, ["a", "b"], ["xyz", ""]) == TaskScores(rewards=[3.0, 0.0], metrics={})


def test_custom_task_reads_jsonl_prompts_and_a_separate_eval_file(tmp_path, reward_file):
    train = write(tmp_path / "train.jsonl", '{"prompt": "Once upon a time", "id": 1}\n\n{"prompt": "The cat sat"}\n')
    held_out = write(tmp_path / "eval.txt", "A held-out prompt\n")
    task = make_task("custom", prompts_file=train, reward=f"{reward_file}:mentions_prompt", eval_prompts_file=held_out)
    assert task.prompts("train") == ["Once upon a time", "The cat sat"]
    assert task.prompts("eval") == ["A held-out prompt"]
    assert task.score(task.prompts("train"), [" Once more", " dog"]).rewards == [1.0, 0.0]


def test_custom_reward_from_an_importable_module(tmp_path, reward_file, monkeypatch):
    monkeypatch.syspath_prepend(str(reward_file.parent))
    prompts_file = write(tmp_path / "prompts.txt", "hello\n")
    task = CustomTask(CustomTaskConfig(prompts_file=prompts_file, reward="my_rewards:length"))
    assert task.reward_function.__module__ == "my_rewards"
    assert task.score(["hello"], ["four"]) == TaskScores(rewards=[4.0], metrics={})


@pytest.mark.parametrize(
    "prompts_text, suffix, message",
    [
        (None, ".txt", "does not exist; pass the path of a .txt or .jsonl file"),
        ("\n  \n", ".txt", "holds no prompts; write at least one"),
        ('{"prompt": "ok"}\n{"text": "no prompt"}\n', ".jsonl", ':2 has no "prompt" string'),
        ('{"prompt": "ok"}\nnot json\n', ".jsonl", ":2 is not valid JSON"),
        ("a prompt\n", ".csv", "must end in .txt"),
    ],
)
def test_bad_prompt_files_give_one_line_errors(tmp_path, reward_file, prompts_text, suffix, message):
    path = tmp_path / f"prompts{suffix}"
    if prompts_text is not None:
        path.write_text(prompts_text)
    with pytest.raises(TaskError, match=message) as caught:
        CustomTask(CustomTaskConfig(prompts_file=path, reward=f"{reward_file}:length"))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "reward, message",
    [
        ("no_such_module_xyz:score", "cannot import reward module 'no_such_module_xyz'"),
        ("{file}:no_such_function", "has no function 'no_such_function'"),
        ("{file}:NOT_A_FUNCTION", "is a int, not a function"),
        ("{missing}:score", "does not exist; pass the path of a .py file"),
        ("just_a_name", "must look like 'module:function'"),
    ],
)
def test_bad_reward_specs_give_one_line_errors(tmp_path, reward_file, reward, message):
    prompts_file = write(tmp_path / "prompts.txt", "hello\n")
    spec = reward.format(file=reward_file, missing=tmp_path / "missing.py")
    with pytest.raises(TaskError, match=message) as caught:
        CustomTask(CustomTaskConfig(prompts_file=prompts_file, reward=spec))
    assert "\n" not in str(caught.value)


def test_reward_file_that_fails_to_import_names_the_error(tmp_path):
    prompts_file = write(tmp_path / "prompts.txt", "hello\n")
    broken = write(tmp_path / "broken.py", "import no_such_dependency_xyz\n")
    with pytest.raises(TaskError, match="cannot import reward module .*no_such_dependency_xyz"):
        CustomTask(CustomTaskConfig(prompts_file=prompts_file, reward=f"{broken}:score"))
    syntax = write(tmp_path / "syntax.py", "def score(:\n")
    with pytest.raises(TaskError, match="failed with SyntaxError"):
        CustomTask(CustomTaskConfig(prompts_file=prompts_file, reward=f"{syntax}:score"))


# ---------------------------------------------------------------- checked_scores and make_task


def custom_task(tmp_path, reward_file, function) -> CustomTask:
    prompts_file = write(tmp_path / "prompts.txt", "a\nb\nc\nd\n")
    return CustomTask(CustomTaskConfig(prompts_file=prompts_file, reward=f"{reward_file}:{function}"))


def test_checked_scores_reports_a_raising_reward(tmp_path, reward_file):
    task = custom_task(tmp_path, reward_file, "explode")
    with pytest.raises(
        RewardError, match="the custom task's reward raised KeyError: 'no score for this'; fix the reward function"
    ):
        checked_scores(task, task.prompts("train"), ["w", "x", "y", "z"])


def test_checked_scores_reports_non_finite_rewards_with_their_indices(tmp_path, reward_file):
    task = custom_task(tmp_path, reward_file, "nan")
    with pytest.raises(RewardError, match=r"not finite for 2 of 4 completions, at index 1 \(nan\), 3 \(inf\)"):
        checked_scores(task, task.prompts("train"), ["w", "x", "y", "z"])


def test_checked_scores_reports_the_wrong_number_of_rewards(tmp_path, reward_file):
    task = custom_task(tmp_path, reward_file, "too_few")
    with pytest.raises(
        RewardError, match="returned 1 rewards for 4 completions; return exactly one number per completion"
    ):
        checked_scores(task, task.prompts("train"), ["w", "x", "y", "z"])


def test_checked_scores_reports_rewards_that_are_not_numbers(tmp_path, reward_file):
    task = custom_task(tmp_path, reward_file, "word")
    with pytest.raises(RewardError, match="returned str .*return a sequence of numbers"):
        checked_scores(task, task.prompts("train"), ["w", "x", "y", "z"])


def test_checked_scores_rejects_mismatched_prompts_and_completions():
    with pytest.raises(TaskError, match="got 2 prompts but 1 completions"):
        checked_scores(ArithmeticTask(), ["What is 1 + 1? Answer:"] * 2, ["2"])


def test_make_task_builds_known_tasks_and_names_the_known_ones():
    task = make_task("arithmetic", operand_max=5, eval_prompts=10)
    assert task.name == "arithmetic" and len(task.prompts("eval")) == 10
    with pytest.raises(TaskError, match="unknown task 'poetry'; known tasks: sentiment, arithmetic, custom"):
        make_task("poetry")
    with pytest.raises(TaskError, match="has no option 'operand_maximum'; its options: operand_min, operand_max"):
        make_task("arithmetic", operand_maximum=5)
    with pytest.raises(TaskError, match="the custom task needs prompts_file and reward"):
        make_task("custom")
