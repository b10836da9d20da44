"""A verifier that cannot read does not start (issue 40 item 4).

Scripted OpenAI-compatible servers on loopback (:class:`servers.MisbehavingServer`, no
``/tokenize``): one that refuses every read with a 4xx, one that ignores the prefill. Before,
the start-up calibration was skipped whenever the server had no ``/tokenize`` and a failed
calibration read was only logged, so both started a verifier that abstained on every read.
"""

from __future__ import annotations

import pytest
from conftest import require
from servers import Fault, MisbehavingServer, scripted_verifier

from densereward.errors import ConfigError, ScoreTokenError


def _build(url: str):
    require("starlette", "serve")
    require("prometheus_client", "serve")
    from densereward.serve.cli import build_service

    return build_service(
        {
            "reward": {
                "type": "dense",
                "track": False,
                "use_async": True,
                "reference_guided": False,
            },
            "verifier": {
                "backend": "openai",
                "backend_options": {"base_url": url},
                "granularity": 20,
            },
        }
    )


def test_a_server_that_refuses_every_read_does_not_start():
    """Before: the calibration was skipped (no /tokenize), the verifier started and abstained
    on every read."""
    msg = "Requested top logprobs of 20 exceeds maximum of 5"
    with MisbehavingServer(default=Fault("status", status=400, message=msg)) as server:
        with pytest.raises(ConfigError) as err:
            _build(server.base_url)
        text = str(err.value)
        assert msg in text and "verifier.backend_options.top_logprobs (sent 20" in text
        assert "calibration" in text
        # without the calibration, the first read says the same instead of abstaining
        v = scripted_verifier(server.base_url, granularity=20, calibrate=False)
        with v, pytest.raises(ConfigError, match="first read.*top_logprobs"):
            v.score_batch(problems=["What is 2 + 2?"], responses=["4"])


def test_a_server_that_ignores_the_prefill_does_not_start():
    """A server that drops continue_final_message opens a new turn: its first token is '<'
    (of '<score>'), not a letter. Before: the verifier started and abstained on every read."""
    new_turn = Fault("ok", top_logprobs=(("<", -0.05), ("The", -4.0)), text="<")
    with MisbehavingServer(default=new_turn) as server:
        with pytest.raises(ScoreTokenError, match="continue_final_message"):
            _build(server.base_url)
        assert len(server.chat_requests(calibration=True)) == 1  # it ran without /tokenize


def test_a_transient_failure_does_not_stop_the_start_but_a_refusal_later_only_abstains():
    with MisbehavingServer() as server:
        server.script(*[Fault("status", status=503)] * 3)
        v = scripted_verifier(
            server.base_url,
            granularity=20,
            backend_options={"max_retries": 2, "retry_base_s": 0.01},
        )
        with v:
            assert v.calibration_mass is None  # could not measure: started, logged
            assert (
                v.score_batch(problems=["q"], responses=["a"])[0].value is not None
            )  # reads answer
            server.script(Fault("status", status=400, message="maximum context length is 8"))
            assert (
                v.score_batch(problems=["q2"], responses=["b"])[0].value is None
            )  # that item abstains


def test_the_calibration_is_measured_without_tokenize_and_a_context_refusal_only_abstains():
    import math

    with MisbehavingServer() as server:
        with scripted_verifier(server.base_url, granularity=5) as v:
            assert v.calibration_mass == pytest.approx(math.exp(-0.05))  # the letter shown: E
        with scripted_verifier(server.base_url, granularity=5, calibrate=False) as v:
            # a prompt too long for the model is the item's fault, even on the first read
            too_long = "This model's maximum context length is 8 tokens"
            server.script(Fault("status", status=400, message=too_long))
            assert v.score_batch(problems=["q"], responses=["a"])[0].value is None
