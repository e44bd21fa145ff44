"""The floor under each phase of a GRPO iteration on SmolLM2-135M (issue 26): how long the bare model takes for the
work of sampling, the no-grad forwards and one minibatch step, done the plain way (Hugging Face ``generate``, a
forward of whole sequences, forward + backward + ``torch.optim.AdamW``) and the way our text path does it (the
distinct prompts once, the rest through their key/value cache: ``sample_responses``, ``continue_prompts``).

The batch is the matched setting of ``benchmarks/peers/grpo_vs_trl.py``: 8 one-digit addition prompts in the chat
template, 8 copies each, responses of exactly ``--new-tokens`` random tokens (no EOS, so it is the longest
iteration the limit allows), minibatches of 16 rows holding 7 distinct prompts (what a random draw of 16 of 8 x 8
holds on average). Each figure is the fastest of ``--repeats`` runs, on ``--threads`` torch threads. Compare an
iteration's ``sampling_seconds``, ``batch_forward_seconds`` and ``update_seconds / 16`` with the rows.

    python -m benchmarks.probes.text_floor --threads 1
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from agents.text.actor_critic import continue_prompts, sample_responses, token_log_probs_and_entropy
from agents.text.rollout import encode_prompts, format_prompts, left_pad
from benchmarks.harness import machine_header
from envs.text.models import load_causal_lm
from envs.text.tasks import make_task
from envs.text.tokens import pad_token_id

GROUPS, GROUP_SIZE, MINIBATCH = 8, 8, 16
MINIBATCH_ROWS = [0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 6, 6]
"""Rows of a 16-row minibatch by prompt: 7 distinct, about what a random draw of 16 of 8 x 8 holds (7.1)."""


def fastest(work: Callable[[], object], repeats: int) -> float:
    """The least wall-clock seconds of ``repeats`` calls of ``work``."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - start)
    return min(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--new-tokens", type=int, default=16, help="response length")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each measurement; the fastest counts")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_header())

    loaded = load_causal_lm()
    lm, tokenizer = loaded.model, loaded.tokenizer
    task = make_task("arithmetic", operand_max=9, operations="+", eval_prompts=40)
    prompts = [p for p in task.prompts("train")[:GROUPS] for _ in range(GROUP_SIZE)]
    encoded = encode_prompts(tokenizer, format_prompts(tokenizer, prompts, chat_template=True), 512)
    pad = pad_token_id(tokenizer)
    prompt_ids, prompt_mask = left_pad(encoded, pad, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    responses = torch.randint(0, lm.config.vocab_size, (len(prompts), args.new_tokens), generator=generator)
    response_mask = torch.ones_like(responses)
    uniforms = torch.rand(len(prompts), args.new_tokens, generator=generator)
    whole_ids, whole_mask = torch.cat([prompt_ids, responses], 1), torch.cat([prompt_mask, response_mask], 1)

    def whole_logp(rows) -> torch.Tensor:
        mask = whole_mask[rows]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        output = lm(input_ids=whole_ids[rows], attention_mask=mask, position_ids=positions,
                    logits_to_keep=args.new_tokens + 1, use_cache=False)  # fmt: skip
        return token_log_probs_and_entropy(output.logits[:, :-1], responses[rows], 1.0)[0]

    def shared_logp(rows) -> torch.Tensor:
        return continue_prompts(lm, prompt_ids[rows], prompt_mask[rows], responses[rows], response_mask[rows], 1.0).logp

    def chunks_of_8(logp_of: Callable) -> Callable[[], None]:
        def forwards() -> None:
            with torch.no_grad():
                for start in range(0, len(prompts), 8):
                    logp_of(slice(start, start + 8))

        return forwards

    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-5, eps=1e-8, weight_decay=0.0)
    rows = torch.tensor(MINIBATCH_ROWS)

    def step_with(logp_of: Callable) -> Callable[[], None]:
        def step() -> None:
            logp = logp_of(rows)
            optimizer.zero_grad(set_to_none=True)
            logp.mean().backward()
            optimizer.step()

        return step

    def generate() -> None:
        with torch.no_grad():
            lm.generate(input_ids=prompt_ids, attention_mask=prompt_mask, max_new_tokens=args.new_tokens,
                        min_new_tokens=args.new_tokens, do_sample=True, pad_token_id=pad)  # fmt: skip

    def ours_sample() -> None:
        sample_responses(lm, prompt_ids, prompt_mask, uniforms, 1.0, -1, pad)

    rows_of_table = [
        ("sampling 64 x new tokens", generate, ours_sample, "HF generate, 64 rows"),
        ("one no-grad pass over 64 sequences", chunks_of_8(whole_logp), chunks_of_8(shared_logp), "8 rows a time"),
        ("one minibatch step (16 rows)", step_with(whole_logp), step_with(shared_logp), "fwd+bwd+AdamW"),
    ]
    print(f"\n{args.threads} thread(s), prompts of {prompt_ids.shape[1]} tokens, {args.new_tokens} new tokens\n")
    print("| phase | plain (s) | ours, shared prompts (s) | plain / ours | plain is |")
    print("|---|---:|---:|---:|---|")
    for name, plain, ours, what in rows_of_table:
        plain_seconds, our_seconds = fastest(plain, args.repeats), fastest(ours, args.repeats)
        print(f"| {name} | {plain_seconds:.2f} | {our_seconds:.2f} | {plain_seconds / our_seconds:.2f}x | {what} |")


if __name__ == "__main__":
    main()
