"""Combining the mean and variance of two sets of samples without the samples (Chan, Golub, LeVeque 1979)."""

from __future__ import annotations

from typing import TypeVar

import torch

Value = TypeVar("Value", float, torch.Tensor)


def combine_moments(
    mean_a: Value, var_a: Value, count_a: Value, mean_b: Value, var_b: Value, count_b: Value
) -> tuple[Value, Value, Value]:
    """Mean, population variance and count of sets a and b together:

    ``n = n_a + n_b``; ``d = m_b - m_a``; ``m = m_a + d n_b / n``; ``v = (v_a n_a + v_b n_b + d^2 n_a n_b / n) / n``.
    Works elementwise on floats or tensors of any shape (per-feature moments).
    """
    total = count_a + count_b
    delta = mean_b - mean_a
    m2 = var_a * count_a + var_b * count_b + delta**2 * count_a * count_b / total
    return mean_a + delta * count_b / total, m2 / total, total
