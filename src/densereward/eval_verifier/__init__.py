"""``densereward eval-verifier``: score a labelled response file and report verification dynamics.

Input is JSONL, one response a row: ``problem``, ``response``, ``is_correct``, ``generator``
(optional ``problem_id``, ``reference``, ``family``), or the GSM8K model-solutions format
(``question``, ``ground_truth`` and one ``{solution, is_correct}`` object per generator),
detected from the first row. Scores come from a :class:`densereward.verifier.Verifier`
built from ``--config``/``--set``, or from a ``scores.jsonl`` written by an earlier run
(``--scores``), so metrics can be recomputed without re-scoring.

Outputs in ``--out``: ``metrics.json`` (every metric), ``report.md``, ``scores.jsonl`` (one
row per response: ``problem_id, generator, is_correct, score, mass, abstained``, plus
``response_index``, ``response_sha1`` to align a reuse, and ``reason`` where known) and PNG
plots. Responses scored 0 without a model read (``reason`` in
:data:`densereward.results.UNREAD_REASONS`: empty, or no final answer to match) count as scored
in every metric and are counted apart (``counts.n_scored_unread``, ``unread``), with the AUROC of
the read responses alone (``overall.auroc_read_only``).
Abstained responses (score ``None``) are counted with their reasons; they are excluded from
the classification metrics and are rejects in the test-time-scaling and rejection-sampling
figures (as in deployment). When most reads abstain (more than half) the report and plots
lead with that (``abstentions.png``) and the command exits with code 3
(:data:`~densereward.eval_verifier.cli.EXIT_MOST_ABSTAINED`).

Python API::

    rows = load_responses("model_solutions_dev.jsonl", limit=10)
    records, stats = score_responses(rows, VerifierConfig())
    metrics = evaluate(rows, [r["score"] for r in records])

Modules: :mod:`.data` (loading rows and earlier scores), :mod:`.scoring` (the verifier's
scores, sparse-reward labels), :mod:`.evaluation` (:func:`evaluate`: every metric, computed by
:mod:`densereward.metrics`), :mod:`.report` (Markdown and the output files), :mod:`.plots`,
:mod:`.cli` (the command).
"""

from .cli import add_arguments, build_config, main
from .data import (
    GSM8K_GENERATORS,
    align_scores,
    load_gsm8k_model_solutions,
    load_responses,
    load_scores,
)
from .evaluation import HEADLINE, MIN_PER_CLASS, abstention_summary, evaluate
from .plots import write_plots
from .report import render_report, write_outputs
from .scoring import label_with_sparse_reward, score_responses

__all__ = [
    "GSM8K_GENERATORS",
    "HEADLINE",
    "MIN_PER_CLASS",
    "load_gsm8k_model_solutions",
    "load_responses",
    "load_scores",
    "align_scores",
    "score_responses",
    "label_with_sparse_reward",
    "evaluate",
    "abstention_summary",
    "render_report",
    "write_plots",
    "write_outputs",
    "build_config",
    "add_arguments",
    "main",
]
