"""The response of an OpenRLHF ``query``: where the prompt ends in the decoded text.

OpenRLHF sends ``query`` = ``tokenizer.decode(prompt_ids + response_ids,
skip_special_tokens=False)`` beside ``prompts`` = the prompt text. The decoded prompt is not
always the prompt text character for character:

* ``clean_up_tokenization_spaces`` drops the space before punctuation and contractions
  (``"2 + 2 ?"`` decodes as ``"2 + 2?"``, ``"do n't"`` as ``"don't"``);
* the tokenizer adds a BOS token the text does not hold (``<|begin_of_text|>``, ``<s>``), a
  batch is left-padded with pad tokens, special tokens are kept or dropped;
* a normaliser (NFKC) rewrites compatibility characters (``"ﬁ"`` -> ``"fi"``).

:func:`split_query` therefore finds the prompt in the query on a *normal form* (NFKC, no
whitespace, no chat-template markup), mapped back to the query's characters, and takes what
follows it. It trusts only two placements: the query starts with the prompt (the normal case),
or the prompt occurs exactly once in the query (the prompt was sent without its chat template).
Anything else -- the prompt is not in the query, or occurs more than once past the start -- is
a :class:`SplitError`: the server answers 422 instead of scoring prompt text (a few-shot
example's answer) as the response. Without ``prompts`` the response is what follows the last
assistant header of a known chat template (ChatML, Llama 3, Gemma, Mistral, DeepSeek, Phi), and
a query with none is refused the same way.

End-of-sequence and other template markers of every model family this knows
(:data:`MARKUP`: ``<|im_end|>``, ``<|endoftext|>``, ``<|eot_id|>``, ``</s>``,
``<end_of_turn>``, ``<eos>``, ``<｜end▁of▁sentence｜>``, ...) are removed from the response.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["MARKUP", "SplitError", "split_query", "clean_prompt", "strip_end_markers"]

MARKUP = re.compile(
    r"<\|[^|<>]{1,40}\|>"  # ChatML, Llama 3, Phi, GPT-2, gpt-oss: <|im_end|>, <|eot_id|>, <|end|>
    r"|<｜[^｜<>]{1,40}｜>"  # DeepSeek: <｜end▁of▁sentence｜>, <｜Assistant｜>
    r"|</?s>|<unk>|<pad>|<bos>|<eos>|<start_of_turn>|<end_of_turn>"  # Llama 2, Mistral, Gemma
    r"|\[/?INST\]|<</?SYS>>|\[gMASK\]|<sop>|<eop>"  # Llama 2 / Mistral, ChatGLM
)
"""Chat-template markup and special tokens: removed from responses, skipped when aligning."""

_ROLE_LINE = re.compile(r"^[ \t]*(?:system|user|assistant|model)[ \t]*$", re.MULTILINE)
_HEADER = re.compile(
    r"<\|im_start\|>[ \t]*assistant[ \t]*\n?"  # ChatML (Qwen, SmolLM)
    r"|<\|start_header_id\|>[ \t]*assistant[ \t]*<\|end_header_id\|>\s*"  # Llama 3
    r"|<start_of_turn>[ \t]*model[ \t]*\n?"  # Gemma
    r"|\[/INST\]"  # Llama 2, Mistral
    r"|<｜Assistant｜>"  # DeepSeek
    r"|<\|assistant\|>[ \t]*\n?"  # Phi-3, Zephyr
)
"""An assistant turn's header: without ``prompts``, the response follows the last one."""
_LEAD = re.compile(
    r"^(?:\s|"
    + MARKUP.pattern
    + r")*(?:(?:assistant|model)[ \t]*(?:\n|(?="
    + MARKUP.pattern
    + r")))?(?:\s|"
    + MARKUP.pattern
    + r")*"
)
_END = re.compile(r"(?:\s|" + MARKUP.pattern + r")+$")


class SplitError(ValueError):
    """The response cannot be told from the prompt in a query (the server answers 422)."""


def clean_prompt(text: str) -> str:
    """The prompt text without chat-template markup (``<|im_start|>``, role lines, ``</s>``).

    >>> clean_prompt("<|start_header_id|>user<|end_header_id|>\\n\\nHi?<|eot_id|>"
    ...              "<|start_header_id|>assistant<|end_header_id|>\\n\\n")
    'Hi?'
    """
    text = _ROLE_LINE.sub("", MARKUP.sub("\n", text))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def strip_end_markers(response: str) -> str:
    """``response`` without the end-of-sequence / padding markers (and whitespace) it ends in.

    >>> strip_end_markers("The answer is 4.<end_of_turn>\\n<eos>")
    'The answer is 4.'
    """
    return _END.sub("", response)


def _clean_response(text: str) -> str:
    """The response after the split: a leading assistant header and all markup removed."""
    return MARKUP.sub("", _LEAD.sub("", text, count=1)).strip()


def _normal(text: str) -> tuple[str, list[int]]:
    """``text`` in the normal form the split aligns on, and where each of its characters ends.

    NFKC per character, whitespace and :data:`MARKUP` dropped; ``ends[j]`` is the index in
    ``text`` just past the character that gave normal character ``j``.
    """
    chars: list[str] = []
    ends: list[int] = []
    pos = 0
    spans = [m.span() for m in MARKUP.finditer(text)] + [(len(text), len(text))]
    for start, stop in spans:
        for i in range(pos, start):
            c = text[i]
            if c.isspace():
                continue
            for n in unicodedata.normalize("NFKC", c) if not c.isascii() else c:
                if not n.isspace():
                    chars.append(n)
                    ends.append(i + 1)
        pos = stop
    return "".join(chars), ends


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def split_query(query: str, prompt: str | None) -> tuple[str, str]:
    """``(problem, response)`` of an OpenRLHF ``query`` (prompt + response, markup kept).

    See the module docstring for what is tolerated and what is refused.

    >>> split_query("<|im_start|>user\\n1+1?<|im_end|>\\n<|im_start|>assistant\\n2<|im_end|>",
    ...             "<|im_start|>user\\n1+1?<|im_end|>\\n<|im_start|>assistant\\n")
    ('1+1?', '2')
    >>> split_query("<s>Q: what is 2+2?\\nA: 4</s>", "Q: what is 2 + 2 ?\\nA:")  # spaces cleaned
    ('Q: what is 2 + 2 ?\\nA:', '4')

    Raises:
        SplitError: when the prompt is not found where the query can be trusted to hold it
            (the message shows where the texts part), or, without a prompt, the query has
            no assistant header.
    """
    if prompt is None:
        headers = list(_HEADER.finditer(query))
        if not headers:
            raise SplitError(
                "no 'prompts' entry and no chat-template assistant header in the query: the "
                "response cannot be told from the prompt; send 'prompts' (OpenRLHF does)"
            )
        last = headers[-1]
        return clean_prompt(query[: last.start()]), _clean_response(query[last.end() :])
    if query.startswith(prompt):
        return clean_prompt(prompt), _clean_response(query[len(prompt) :])
    q, q_ends = _normal(query)
    p, _ = _normal(prompt)
    if not p:  # the prompt is markup only: everything is the response
        return "", _clean_response(query)
    if q.startswith(p):
        cut = q_ends[len(p) - 1]
    else:
        first = q.find(p)
        if first < 0:
            at = _first_difference(q, p)
            raise SplitError(
                "the prompt is not at the start of the query, nor anywhere in it, even with "
                "whitespace, markup and Unicode compatibility forms ignored: they part at "
                f"{q[max(0, at - 20) : at + 20]!r} (query) vs {p[max(0, at - 20) : at + 20]!r} "
                "(prompt); the response cannot be told from the prompt"
            )
        if q.find(p, first + 1) >= 0:
            raise SplitError(
                "the prompt is not at the start of the query and occurs more than once in it: "
                "the response cannot be told from the prompt"
            )
        cut = q_ends[first + len(p) - 1]
    return clean_prompt(prompt), _clean_response(query[cut:])
