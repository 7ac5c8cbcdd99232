"""Sizes shared by the workload tests: small enough that setup takes about a second."""

from __future__ import annotations

TINY_TRAIN = {
    "train_batch": 4,
    "train_seq": 32,
    "train_width": 64,
    "train_layers": 2,
    "train_heads": 2,
    "train_vocab": 256,
}
