"""``densereward distill``: pairwise verifier labels on robot states, distilled into a reward model.

The verifier is asked a bounded number of pairwise questions about state texts ("which state
is closer to completing the task?", both orders; :mod:`.core`); a small Bradley-Terry network
on the raw observation is fitted to the answers (:mod:`densereward.reward_model`) and saved as
a directory that ``env.reward: distilled`` (SAC) and ``eval-progress --reward-model`` read.
"""

from .cli import EXIT_MOST_ABSTAINED, add_arguments, build_configs, main
from .core import (
    LABEL_KINDS,
    LABELS_FILE,
    READS_FILE,
    DistillConfig,
    States,
    collect_states,
    label_pairs,
    label_summary,
    pointwise_pairs,
    read_labels,
    read_texts,
    select_pairs,
    select_texts,
    training_pairs,
)

__all__ = [
    "EXIT_MOST_ABSTAINED",
    "add_arguments",
    "build_configs",
    "main",
    "LABEL_KINDS",
    "LABELS_FILE",
    "READS_FILE",
    "DistillConfig",
    "States",
    "collect_states",
    "label_pairs",
    "label_summary",
    "pointwise_pairs",
    "read_labels",
    "read_texts",
    "select_pairs",
    "select_texts",
    "training_pairs",
]
