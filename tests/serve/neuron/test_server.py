"""The OpenAI-compatible routes of the Neuron server, driven through its ASGI app with an
in-memory engine: response shapes, streaming, usage, validation and engine failures."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eks_inference.serve.neuron.config import ServerConfig
from eks_inference.serve.neuron.server import OpenAIServer
from tests.helpers.serve_fakes import BOS, FakeEngine, HTTPResult, call_app

MAX_MODEL_LEN = 64

CONFIG = ServerConfig(
    model="/models/llama-3-8b",
    served_model_name="llama-3-8b",
    tensor_parallel_size=2,
    max_model_len=MAX_MODEL_LEN,
    max_num_seqs=4,
    block_size=32,
    dtype="bfloat16",
    additional_config={"override_neuron_config": {"sequence_parallel_enabled": False}},
)

REPLY = "Hello there, friend."


def request(
    engine: FakeEngine, method: str, path: str, payload: Any = None, **kwargs: Any
) -> HTTPResult:
    app = OpenAIServer(CONFIG, engine).asgi_app()
    return asyncio.run(call_app(app, method, path, payload, **kwargs))


def assert_error(
    result: HTTPResult, status: int, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    assert result.status == status, result.body
    error = result.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param
    assert error["code"] == code
    return dict(error)


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


# -- health and models -----------------------------------------------------------------------


def test_health_is_200_while_the_engine_runs(engine: FakeEngine) -> None:
    assert request(engine, "GET", "/health").status == 200


def test_health_is_503_once_the_engine_died(engine: FakeEngine) -> None:
    engine.healthy = False
    error = assert_error(request(engine, "GET", "/health"), 503)
    assert error["type"] == "server_error"


def test_models_lists_the_served_model(engine: FakeEngine) -> None:
    result = request(engine, "GET", "/v1/models")
    assert result.status == 200
    body = result.json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert card["id"] == "llama-3-8b"
    assert card["object"] == "model"
    assert isinstance(card["created"], int)
    assert card["max_model_len"] == MAX_MODEL_LEN


def test_model_retrieval(engine: FakeEngine) -> None:
    assert request(engine, "GET", "/v1/models/llama-3-8b").json()["id"] == "llama-3-8b"
    assert_error(
        request(engine, "GET", "/v1/models/gpt-4"), 404, param="model", code="model_not_found"
    )


def test_unknown_routes_and_methods_answer_in_openai_error_shape(engine: FakeEngine) -> None:
    assert_error(request(engine, "GET", "/v1/engines"), 404)
    assert_error(request(engine, "GET", "/v1/completions"), 405)


# -- completions -----------------------------------------------------------------------------


def test_completion_response_shape_and_usage(engine: FakeEngine) -> None:
    result = request(
        engine,
        "POST",
        "/v1/completions",
        {"model": "llama-3-8b", "prompt": "Say hello to me", "max_tokens": 10},
    )
    assert result.status == 200
    body = result.json()
    assert body["id"].startswith("cmpl-")
    assert body["object"] == "text_completion"
    assert isinstance(body["created"], int)
    assert body["model"] == "llama-3-8b"
    assert body["choices"] == [
        {"index": 0, "text": REPLY, "logprobs": None, "finish_reason": "stop"}
    ]
    # BOS plus four words in the prompt, five words generated.
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    (call,) = engine.calls
    assert call.prompt_token_ids[0] == BOS
    assert call.options.max_tokens == 10


def test_completion_stops_at_max_tokens_with_finish_reason_length(engine: FakeEngine) -> None:
    body = request(engine, "POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2}).json()
    assert body["choices"][0]["text"] == "Hello there"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 2


def test_completion_defaults_to_openai_max_tokens(engine: FakeEngine) -> None:
    request(engine, "POST", "/v1/completions", {"prompt": "Hi"})
    assert engine.calls[0].options.max_tokens == 16


def test_completion_passes_sampling_settings(engine: FakeEngine) -> None:
    request(
        engine,
        "POST",
        "/v1/completions",
        {
            "prompt": "Hi",
            "max_tokens": 4,
            "temperature": 0,
            "top_p": 0.9,
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "stop": "\n",
            "seed": 7,
            "user": "ignored-extra-field",
        },
    )
    options = engine.calls[0].options
    assert options.temperature == 0
    assert options.top_p == 0.9
    assert options.presence_penalty == 0.5
    assert options.frequency_penalty == -0.5
    assert options.stop == ("\n",)
    assert options.seed == 7


def test_completion_leaves_unset_sampling_to_the_engine(engine: FakeEngine) -> None:
    request(engine, "POST", "/v1/completions", {"prompt": "Hi"})
    options = engine.calls[0].options
    assert (options.temperature, options.top_p, options.seed, options.stop) == (
        None,
        None,
        None,
        (),
    )


def test_completion_with_several_prompts_returns_one_choice_each(engine: FakeEngine) -> None:
    body = request(
        engine, "POST", "/v1/completions", {"prompt": ["One", "Two words"], "max_tokens": 3}
    ).json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert all(c["text"] == "Hello there," for c in body["choices"])
    assert body["usage"] == {"prompt_tokens": 2 + 3, "completion_tokens": 6, "total_tokens": 11}
    assert len({call.request_id for call in engine.calls}) == 2


def test_completion_stream_events(engine: FakeEngine) -> None:
    result = request(engine, "POST", "/v1/completions", {"prompt": "Hi", "stream": True})
    assert result.status == 200
    assert result.headers["content-type"].startswith("text/event-stream")
    chunks = result.event_payloads()
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert all(c["object"] == "text_completion" and c["model"] == "llama-3-8b" for c in chunks)
    assert all("usage" not in c for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == REPLY
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["stop"]


def test_completion_stream_with_usage(engine: FakeEngine) -> None:
    chunks = request(
        engine,
        "POST",
        "/v1/completions",
        {
            "prompt": "Hi you",
            "max_tokens": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ).event_payloads()
    *text_chunks, usage_chunk = chunks
    assert all(c["usage"] is None for c in text_chunks)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_completion_stream_with_several_prompts_tags_choices(engine: FakeEngine) -> None:
    chunks = request(
        engine, "POST", "/v1/completions", {"prompt": ["A", "B"], "max_tokens": 2, "stream": True}
    ).event_payloads()
    for index in (0, 1):
        mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == index]
        assert "".join(c["text"] for c in mine) == "Hello there"
        assert mine[-1]["finish_reason"] == "length"


# -- chat completions ------------------------------------------------------------------------


CHAT = {
    "model": "llama-3-8b",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Greet me"},
    ],
}


def test_chat_response_shape_and_usage(engine: FakeEngine) -> None:
    result = request(engine, "POST", "/v1/chat/completions", CHAT)
    assert result.status == 200
    body = result.json()
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert body["model"] == "llama-3-8b"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": REPLY},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    # "<|system|> Be brief. <|user|> Greet me <|assistant|>": seven words, no BOS added.
    assert body["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    assert engine.calls[0].prompt_token_ids[0] != BOS


def test_chat_defaults_max_tokens_to_the_rest_of_the_context(engine: FakeEngine) -> None:
    request(engine, "POST", "/v1/chat/completions", CHAT)
    assert engine.calls[0].options.max_tokens == MAX_MODEL_LEN - 7


def test_chat_prefers_max_completion_tokens(engine: FakeEngine) -> None:
    request(
        engine,
        "POST",
        "/v1/chat/completions",
        {**CHAT, "max_tokens": 9, "max_completion_tokens": 3},
    )
    assert engine.calls[0].options.max_tokens == 3


def test_chat_accepts_text_content_parts(engine: FakeEngine) -> None:
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "a b"}, {"type": "text", "text": "c"}],
        }
    ]
    body = request(engine, "POST", "/v1/chat/completions", {"messages": messages}).json()
    # "<|user|> a b\nc <|assistant|>": five words.
    assert body["usage"]["prompt_tokens"] == 5


def test_chat_stream_events(engine: FakeEngine) -> None:
    chunks = request(
        engine, "POST", "/v1/chat/completions", {**CHAT, "stream": True}
    ).event_payloads()
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    first, *content, last = [c["choices"][0] for c in chunks]
    assert first["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["delta"]["content"] for c in content) == REPLY
    assert all(c["finish_reason"] is None for c in [first, *content])
    assert last == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}


def test_chat_stream_with_usage(engine: FakeEngine) -> None:
    chunks = request(
        engine,
        "POST",
        "/v1/chat/completions",
        {**CHAT, "stream": True, "stream_options": {"include_usage": True}},
    ).event_payloads()
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    assert all(c["usage"] is None for c in chunks[:-1])


def test_chat_template_rejection_is_a_400(engine: FakeEngine) -> None:
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    result = request(engine, "POST", "/v1/chat/completions", {"messages": messages})
    assert "roles must alternate" in assert_error(result, 400, param="messages")["message"]


# -- request validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "payload", "param"),
    [
        ("/v1/completions", {"max_tokens": 5}, "prompt"),
        ("/v1/completions", {"prompt": ""}, "prompt"),
        ("/v1/completions", {"prompt": []}, "prompt"),
        ("/v1/completions", {"prompt": [1, 2, 3]}, "prompt"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": -3}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": "5"}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 2.5}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "temperature": 2.5}, "temperature"),
        ("/v1/completions", {"prompt": "x", "temperature": -0.1}, "temperature"),
        ("/v1/completions", {"prompt": "x", "top_p": 0}, "top_p"),
        ("/v1/completions", {"prompt": "x", "top_p": 1.5}, "top_p"),
        ("/v1/completions", {"prompt": "x", "presence_penalty": 3}, "presence_penalty"),
        ("/v1/completions", {"prompt": "x", "n": 2}, "n"),
        ("/v1/completions", {"prompt": "x", "stop": ["ok", ""]}, "stop"),
        ("/v1/completions", {"prompt": "x", "stream": "yes"}, "stream"),
        ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, None),
        ("/v1/completions", {"prompt": "x", "logprobs": 0}, "logprobs"),
        ("/v1/completions", {"prompt": "x", "echo": True}, "echo"),
        ("/v1/completions", {"prompt": "x", "logit_bias": {"50256": -100}}, "logit_bias"),
        ("/v1/chat/completions", {"model": "llama-3-8b"}, "messages"),
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, "messages.0.role"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "tool", "content": "{}"}]},
            "messages.0.role",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "messages.0.content",
        ),
        ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 0}, "max_completion_tokens"),
        ("/v1/chat/completions", {**CHAT, "temperature": 3}, "temperature"),
        ("/v1/chat/completions", {**CHAT, "logprobs": True}, "logprobs"),
        ("/v1/chat/completions", {**CHAT, "tools": [{"type": "function"}]}, "tools"),
        (
            "/v1/chat/completions",
            {**CHAT, "response_format": {"type": "json_object"}},
            "response_format",
        ),
    ],
)
def test_invalid_requests_are_400_in_openai_error_shape(
    engine: FakeEngine, path: str, payload: dict[str, Any], param: str | None
) -> None:
    error = assert_error(request(engine, "POST", path, payload), 400, param=param)
    assert error["type"] == "invalid_request_error"
    assert not engine.calls


@pytest.mark.parametrize("raw_body", [b"", b"{not json", b"[1, 2]", b'"prompt"', b"\xff\xfe"])
def test_bodies_that_are_not_json_objects_are_400(engine: FakeEngine, raw_body: bytes) -> None:
    assert_error(request(engine, "POST", "/v1/completions", raw_body=raw_body), 400)


def test_neutral_values_of_unsupported_fields_are_accepted(engine: FakeEngine) -> None:
    result = request(
        engine,
        "POST",
        "/v1/chat/completions",
        {**CHAT, "logprobs": False, "tools": [], "response_format": {"type": "text"}, "n": 1},
    )
    assert result.status == 200


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_an_unknown_model_is_404(engine: FakeEngine, path: str) -> None:
    payload = {"model": "gpt-4", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}
    error = assert_error(
        request(engine, "POST", path, payload), 404, param="model", code="model_not_found"
    )
    assert "gpt-4" in error["message"]
    assert not engine.calls


def test_a_prompt_filling_the_context_is_400(engine: FakeEngine) -> None:
    prompt = " ".join(["word"] * MAX_MODEL_LEN)
    result = request(engine, "POST", "/v1/completions", {"prompt": prompt})
    assert_error(result, 400, param="prompt", code="context_length_exceeded")
    assert not engine.calls


def test_max_tokens_beyond_the_context_is_400(engine: FakeEngine) -> None:
    result = request(
        engine, "POST", "/v1/completions", {"prompt": "a b c", "max_tokens": MAX_MODEL_LEN}
    )
    error = assert_error(result, 400, param="max_tokens", code="context_length_exceeded")
    assert f"requested {4 + MAX_MODEL_LEN} tokens" in error["message"]


def test_default_completion_budget_is_capped_by_the_context(engine: FakeEngine) -> None:
    prompt = " ".join(["word"] * (MAX_MODEL_LEN - 6))  # BOS + 58 words: 5 tokens of room
    request(engine, "POST", "/v1/completions", {"prompt": prompt})
    assert engine.calls[0].options.max_tokens == 5


def test_settings_the_engine_rejects_are_400(engine: FakeEngine) -> None:
    result = request(engine, "POST", "/v1/completions", {"prompt": "x", "seed": -1})
    assert "seed" in assert_error(result, 400)["message"]


# -- engine failures and disconnects ---------------------------------------------------------


def test_engine_death_during_a_request_is_503(engine: FakeEngine) -> None:
    engine.fail_after = 2
    engine.healthy = False
    result = request(engine, "POST", "/v1/completions", {"prompt": "x"})
    assert assert_error(result, 503, code="engine_unavailable")["type"] == "server_error"


def test_an_unexpected_engine_error_is_500(engine: FakeEngine) -> None:
    engine.fail_after = 2
    result = request(engine, "POST", "/v1/chat/completions", CHAT)
    assert assert_error(result, 500)["type"] == "server_error"


def test_a_failing_stream_ends_with_an_error_event_then_done(engine: FakeEngine) -> None:
    engine.fail_after = 2
    engine.healthy = False
    result = request(engine, "POST", "/v1/chat/completions", {**CHAT, "stream": True})
    assert result.status == 200
    *chunks, error_event = result.event_payloads()
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Hello there"
    assert error_event["error"]["code"] == "engine_unavailable"


@pytest.mark.parametrize("stream", [False, True])
def test_a_failing_prompt_of_several_aborts_the_others(engine: FakeEngine, stream: bool) -> None:
    engine.fail_after = 1
    engine.failing_calls = frozenset({1})
    engine.hold_after = 1  # the others would never finish on their own
    result = request(
        engine, "POST", "/v1/completions", {"prompt": ["a", "b", "c"], "stream": stream}
    )
    if stream:
        assert result.event_payloads()[-1]["error"]["type"] == "server_error"
    else:
        assert_error(result, 500)
    assert sorted(engine.aborted) == sorted(call.request_id for call in engine.calls)
    assert len(engine.aborted) == 3


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_client_leaving_a_stream_aborts_the_generation(engine: FakeEngine, path: str) -> None:
    engine.hold_after = 2
    payload = {"prompt": "x", "messages": [{"role": "user", "content": "x"}], "stream": True}
    result = request(engine, "POST", path, payload, disconnect_after_chunks=2)
    assert result.status == 200
    assert engine.aborted == [engine.calls[0].request_id]
    assert not engine.finished
