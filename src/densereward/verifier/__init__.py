"""The verifier engine: fine-grained scores from score-token distributions.

Implements the continuous verifier reward of LLM-as-a-Verifier (Kwok et al. 2026). With G
ordered score tokens ``v_1..v_G`` with values ``phi(v_g)``, C criteria and K repeats:

    R(x, tau) = 1/(C K) * sum_c sum_k sum_g p(v_g | x, c, tau) * phi(v_g)        (eq. 1)

normalised to ``[0, 1]`` by ``(R - phi_min) / (phi_max - phi_min)``, where ``p`` is the
verifier's next-token distribution at the score position restricted to the score tokens
and renormalised. Every spelling of a score token (``"A"`` and ``" A"``) is summed into its
level. Where no score token has mass the engine abstains (``value=None``, counted).

All model I/O goes through one backend (:mod:`densereward.backends`); every method exists
as a sync and an ``a``-prefixed async variant built from the same plan, so both compute
identical numbers.

- :mod:`.engine`: :class:`Verifier` (prompts, plans, the batch verbs and ``rank``);
- :mod:`.verbs`: the one-item verbs (``score``, ``compare``, ``progress_curve``, sync + async);
- :mod:`.lazy`: :class:`VerifierFactory` (the picklable recipe) and :class:`VerifierHolder`;
- :mod:`.reads`: one read's distribution and eq. 1 over reads, :class:`VerifierStats`;
- :mod:`.driver`: runs plans against the backend (batches, cache, failures).

Example:
    >>> from densereward import Verifier                       # doctest: +SKIP
    >>> v = Verifier()                                          # embedded SmolLM2-135M  # doctest: +SKIP
    >>> r = v.score(problem="What is 7+5?", response="12")      # doctest: +SKIP
    >>> r.value, r.mass, r.argmax_value                          # doctest: +SKIP
"""

from __future__ import annotations

from .engine import Verifier
from .lazy import VerifierFactory
from .reads import VerifierStats, distribution_from_logprobs

__all__ = ["Verifier", "VerifierFactory", "VerifierStats", "distribution_from_logprobs"]
