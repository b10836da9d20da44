"""``densereward serve``: the dense reward behind HTTP, for RL stacks other than TRL.

:mod:`.app` (the Starlette application, micro-batching, Prometheus metrics), :mod:`.contracts`
(OpenRLHF's, slime's and the plain JSON shapes), :mod:`.cli` (config and uvicorn) and
:mod:`.verl_reward` (a verl ``custom_reward_function`` that calls the server; standalone, so
verl can load it by path). Needs the ``serve`` extra: ``pip install 'densereward[serve]'``.
"""
