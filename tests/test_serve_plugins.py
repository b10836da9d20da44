"""A GRPO reward kind with a YAML parameter and an HTTP contract, each from a plugin distribution,
served by ``densereward serve`` (issue 42 item 1).

The fixture writes a tiny installed distribution (a module and its ``*.dist-info`` with
``entry_points.txt``) into a temporary directory on ``sys.path``: the reward kind is an entry of
the group ``densereward.grpo_rewards`` (a :class:`~densereward.rewards.kinds.RewardKind` whose
options dataclass is filled from ``reward.options``), the contract one of
``densereward.serve_protocols`` (a :class:`~densereward.serve.protocols.ServeProtocol`). Nothing
registers them in Python. The server is a real uvicorn on loopback; its verifier an
OpenAI-compatible scripted server (:class:`servers.MisbehavingServer`) the plugin reward never
reads, so no model loads.
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import require

require("starlette", "serve")
require("uvicorn", "serve")
require("prometheus_client", "serve")

import httpx  # noqa: E402
from plugin_dist import install  # noqa: E402
from servers import MisbehavingServer  # noqa: E402
from test_serve import Running  # noqa: E402

from densereward.config import load_yaml  # noqa: E402
from densereward.errors import ConfigError  # noqa: E402
from densereward.rewards.kinds import GRPO_REWARDS  # noqa: E402
from densereward.serve.app import ServeConfig, make_app  # noqa: E402
from densereward.serve.cli import build_service  # noqa: E402
from densereward.serve.protocols import SERVE_PROTOCOLS  # noqa: E402

MODULE = "dr_serve_plugin"

SOURCE = '''
"""A reward kind with a parameter and a new trainer's HTTP contract."""

from dataclasses import dataclass

from densereward.rewards._common import completion_texts
from densereward.rewards.kinds import RewardKind
from densereward.serve.contracts import Item, RequestError
from densereward.serve.protocols import ServeProtocol


@dataclass(frozen=True)
class LengthOptions:
    limit: int = 200  # characters


class LengthReward:
    def __init__(self, limit):
        self.limit, self.__name__ = limit, "length"

    def __call__(self, prompts, completions, **kwargs):
        return [None if t == "ABSTAIN" else float(len(t) <= self.limit)
                for t in completion_texts(completions)]


LENGTH = RewardKind(lambda ctx: ([LengthReward(ctx.options.limit)], None),
                    options=LengthOptions, uses_verifier=False)


# the contract: POST /v2/values {"samples": [{"prompt", "completion"}]} -> {"values": [...]}
def parse(body, query, cfg):
    samples = body.get("samples") if isinstance(body, dict) else None
    if not isinstance(samples, list) or not samples:
        raise RequestError("field 'samples' must be a non-empty list")
    return [Item(str(s["prompt"]), str(s["completion"])) for s in samples], query.get("scale", "1")


def respond(rewards, scale, cfg):
    values = [None if r is None else r * float(scale) for r in rewards]
    return {"values": values}, sum(v is None for v in values)


VALUES = ServeProtocol(paths=("/v2/values",), parse=parse, respond=respond)
NOT_A_PROTOCOL = {"paths": ["/nope"]}
'''

ENTRY_POINTS = f"""
[densereward.grpo_rewards]
plugin_length = {MODULE}:LENGTH

[densereward.serve_protocols]
plugin_values = {MODULE}:VALUES
plugin_nope = {MODULE}:NOT_A_PROTOCOL
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    registries = (GRPO_REWARDS, SERVE_PROTOCOLS)
    yield from install(tmp_path, monkeypatch, MODULE, SOURCE, ENTRY_POINTS, registries)


def test_a_plugin_reward_kind_and_protocol_are_served_from_yaml(plugin, tmp_path):
    path = tmp_path / "serve.yaml"
    with MisbehavingServer() as verifier_server:
        path.write_text(
            textwrap.dedent(f"""
            reward: {{type: plugin_length, options: {{limit: '5'}}, track: false,
                      reference_guided: false}}
            verifier: {{backend: openai, calibrate: false,
                        backend_options: {{base_url: "{verifier_server.base_url}"}}}}
            serve: {{protocols: [plugin_values, score], batch_wait_ms: 1}}
        """)
        )
        service, close = build_service(load_yaml(path))
        running = Running(make_app(service))
        try:
            body = {
                "samples": [
                    {"prompt": "2+2", "completion": "4"},
                    {"prompt": "2+2", "completion": "the answer is 4"},
                    {"prompt": "2+2", "completion": "ABSTAIN"},
                ]
            }
            r = httpx.post(f"{running.url}/v2/values?scale=2", json=body, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json() == {"values": [2.0, 0.0, None]}  # limit 5 from reward.options
            assert r.headers["X-Densereward-Abstained"] == "1"
            bad = httpx.post(f"{running.url}/v2/values", json={"samples": []}, timeout=30)
            assert bad.status_code == 422 and "'samples' must be" in bad.json()["error"]
            # the built-in /score beside it, the same reward; /get_reward is not served
            r = httpx.post(
                f"{running.url}/score", timeout=30, json={"problems": ["q"], "responses": ["12345"]}
            )
            assert r.json() == {"rewards": [1.0], "abstained": [False]}
            assert httpx.post(f"{running.url}/get_reward", json={}, timeout=30).status_code == 404
            metrics = httpx.get(f"{running.url}/metrics", timeout=30).text
            assert (
                'densereward_requests_total{endpoint="plugin_values",status="200"} 1.0' in metrics
            )
            assert 'endpoint="plugin_values",reason="invalid"' in metrics
        finally:
            running.stop()
            close()
        assert verifier_server.chat_requests() == []  # the plugin reward never read it


def test_serve_protocol_names_are_checked(plugin):
    with pytest.raises(ConfigError, match=r"serve.protocols: .*Did you mean 'plugin_values'"):
        ServeConfig(protocols=["plugin_valeus"])
    with pytest.raises(ConfigError, match="must be a densereward.serve.protocols.ServeProtocol"):
        make_app(_service(ServeConfig(protocols=("plugin_nope",))))
    with pytest.raises(ConfigError, match="non-empty list"):
        ServeConfig(protocols="score")


def _service(cfg: ServeConfig):
    from densereward.serve.app import RewardService

    return RewardService([lambda **kw: [1.0] * len(kw["completions"])], None, None, cfg)
