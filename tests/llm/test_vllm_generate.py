"""What the vLLM engine of the OpenAI-compatible routes (app.llm.vllm_generate) sends and reads,
on a recorded vLLM stream: a constraint and the log-probabilities asked for in each endpoint's
words, and both endpoints' ``logprobs`` shapes read back as the same entries. The real server
answers them in tests/api/test_openai_vllm.py."""

from __future__ import annotations

import json

import httpx

from app.llm.generation import Finished, GenerationParams, Logprobs, TokenLogprob
from app.llm.vllm_generate import VLLMGenerator

CHAT_CHUNK = {
    "choices": [{
        "delta": {"content": " Paris"},
        "logprobs": {"content": [{"token": " Paris", "logprob": -0.1, "bytes": [],
                                  "top_logprobs": [{"token": " Paris", "logprob": -0.1},
                                                   {"token": " Rome", "logprob": "-Infinity"}]}]},
        "finish_reason": None,
    }]
}  # fmt: skip
TEXT_CHUNK = {
    "choices": [{
        "text": " Paris",
        "logprobs": {"tokens": [" Paris"], "token_logprobs": [-0.1], "text_offset": [7],
                     "top_logprobs": [{" Rome": float("-inf"), " Paris": -0.1}]},
        "finish_reason": "stop",
    }]
}  # fmt: skip
USAGE = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1}}
EXPECTED = Logprobs((TokenLogprob(" Paris", -0.1, ((" Paris", -0.1), (" Rome", -9999.0))),))


def recorded(chunks: list[dict], sent: list[dict]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append({"path": request.url.path, **json.loads(request.content)})
        events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, text=events, headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(answer)


def generator(chunks: list[dict], sent: list[dict]) -> VLLMGenerator:
    engine = VLLMGenerator("http://vllm.test", "m")
    engine._client = httpx.Client(transport=recorded(chunks, sent))
    return engine


def test_chat_asks_for_top_logprobs_and_sends_the_constraint() -> None:
    sent: list[dict] = []
    constraint = {"structured_outputs": {"choice": [" Paris", " Rome"]}}
    params = GenerationParams(max_tokens=4, logprobs=2)
    items = list(generator([CHAT_CHUNK, USAGE], sent).chat([{"role": "user", "content": "x"}],
                                                           params, constraint))  # fmt: skip
    assert items == [EXPECTED, " Paris", Finished("length", 7, 1)]
    [body] = sent
    assert body["path"] == "/v1/chat/completions"
    assert (body["logprobs"], body["top_logprobs"]) == (True, 2)
    assert body["structured_outputs"] == constraint["structured_outputs"]


def test_completions_ask_for_logprobs_as_a_count_and_read_their_shape() -> None:
    sent: list[dict] = []
    params = GenerationParams(max_tokens=4, logprobs=1)
    items = list(generator([TEXT_CHUNK, USAGE], sent).complete("Capital:", params))
    assert items == [EXPECTED, " Paris", Finished("stop", 7, 1)]  # most probable first
    assert sent[0]["path"] == "/v1/completions" and sent[0]["logprobs"] == 1
    assert "structured_outputs" not in sent[0] and "top_logprobs" not in sent[0]


def test_nothing_is_asked_that_the_app_did_not_ask() -> None:
    sent: list[dict] = []
    list(generator([USAGE], sent).complete("Capital:", GenerationParams(max_tokens=1)))
    assert "logprobs" not in sent[0] and "response_format" not in sent[0]


def test_a_stop_strings_tokens_are_left_out_and_held_back_ones_go_with_their_text() -> None:
    def chunk(text: str, *tokens: str) -> dict:
        entries = [{"token": t, "logprob": -1.0, "top_logprobs": []} for t in tokens]
        return {"choices": [{"delta": {"content": text}, "logprobs": {"content": entries}}]}

    # " A", then "\n" held back (a stop's beginning), released with " B"; then the stop itself
    chunks = [chunk(" A", " A"), chunk("", "\n"), chunk("\n B", " B"), chunk("", "\n", "User", ":")]
    items = list(generator([*chunks, USAGE], []).chat([], GenerationParams(max_tokens=8)))
    logprobs = [[t.token for t in item.tokens] for item in items if isinstance(item, Logprobs)]
    assert logprobs == [[" A"], ["\n", " B"]]
    assert "".join(item for item in items if isinstance(item, str)) == " A\n B"


def test_a_stop_strings_tokens_sent_with_the_text_before_it_are_left_out() -> None:
    """vLLM held " France" back until "\\nUser:" ended the answer, then sent the text alone
    with the four tokens' log-probabilities (seen on the CPU build)."""
    entries = [{"token": t, "logprob": -1.0, "top_logprobs": []}
               for t in (" France", "\\n", "User", ":")]  # fmt: skip
    stopped = {"choices": [{"delta": {"content": " France"}, "logprobs": {"content": entries},
                            "finish_reason": "stop"}]}  # fmt: skip
    items = list(generator([stopped, USAGE], []).chat([], GenerationParams(max_tokens=8)))
    [logprobs] = [item for item in items if isinstance(item, Logprobs)]
    assert [t.token for t in logprobs.tokens] == [" France"]


def test_text_held_back_and_sent_in_pieces_of_its_own_carries_its_tokens() -> None:
    """The CPU build's stream before the stop "\\nUser:": the tokens come first, the text
    " Paris" later, cut elsewhere than the tokens."""

    def chunk(text: str, token: str) -> dict:
        entry = {"tokens": [token], "token_logprobs": [-1.0], "top_logprobs": [{token: -1.0}]}
        return {"choices": [{"text": text, "logprobs": entry, "finish_reason": None}]}

    chunks = [chunk("", " Paris"), chunk("", "\n"), chunk(" Par", "User"), chunk("is", ":")]
    items = list(generator([*chunks, USAGE], []).complete("x", GenerationParams(max_tokens=4)))
    assert [[t.token for t in i.tokens] for i in items if isinstance(i, Logprobs)] == [[" Paris"]]
    assert [i for i in items if isinstance(i, str)] == [" Par", "is"]
