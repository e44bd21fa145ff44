"""How much batching reviews by length saves when the sentiment reward head embeds them: ``MiniLMEncoder.embed_many``
(texts sorted by length, as sentence-transformers' ``encode`` does) against batches taken in the reviews' own order,
on the same IMDB training reviews in one run. Prints seconds, the ratio, the padded tokens each computes and the
largest difference between the two embeddings.

    python -m benchmarks.probes.encoder_batching --reviews 1000 --max-tokens 256
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.harness import machine_header
from envs.text.tasks import minilm
from envs.text.tasks.sentiment import imdb_split


def in_given_order(encoder: minilm.MiniLMEncoder, texts: list[str], max_tokens: int) -> torch.Tensor:
    """The peer: ``embed`` over consecutive batches of ``ENCODER_BATCH`` texts in the order given."""
    starts = range(0, len(texts), minilm.ENCODER_BATCH)
    return torch.cat([encoder.embed(texts[i : i + minilm.ENCODER_BATCH], max_tokens) for i in starts])


def padded_tokens(encoder: minilm.MiniLMEncoder, batches: list[list[str]], max_tokens: int) -> int:
    """Token positions the encoder computes: each batch is padded to its longest text."""
    tokenized = encoder.tokenizer(sum(batches, []), truncation=True, max_length=max_tokens)
    lengths = [len(ids) for ids in tokenized.input_ids]
    total, start = 0, 0
    for batch in batches:
        total += len(batch) * max(lengths[start : start + len(batch)])
        start += len(batch)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=1000, help="IMDB training reviews to embed")
    parser.add_argument("--max-tokens", type=int, default=256, help="encoder tokens kept per review")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_header())
    texts = [review.text for review in imdb_split("train")[: args.reviews]]
    encoder = minilm.MiniLMEncoder()
    encoder.embed(texts[:8], args.max_tokens)  # warm-up

    start = time.perf_counter()
    given = in_given_order(encoder, texts, args.max_tokens)
    given_seconds = time.perf_counter() - start
    start = time.perf_counter()
    by_length = encoder.embed_many(texts, args.max_tokens)
    sorted_seconds = time.perf_counter() - start

    size = minilm.ENCODER_BATCH
    ordered = sorted(texts, key=len, reverse=True)
    starts = range(0, len(texts), size)
    given_tokens = padded_tokens(encoder, [texts[i : i + size] for i in starts], args.max_tokens)
    sorted_tokens = padded_tokens(encoder, [ordered[i : i + size] for i in starts], args.max_tokens)
    print(f"{args.reviews} reviews, {args.max_tokens} tokens at most, batches of {size}, {args.threads} thread(s)")
    print(f"in the given order: {given_seconds:.1f} s, {given_tokens:,} token positions")
    print(f"sorted by length:   {sorted_seconds:.1f} s, {sorted_tokens:,} token positions")
    difference = (given - by_length).abs().max()
    print(f"speed-up: {given_seconds / sorted_seconds:.2f}x; largest embedding difference {difference:.1e}")


if __name__ == "__main__":
    main()
