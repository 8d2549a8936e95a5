"""``/openapi.json`` describes the API as the parser checks it, and a
property-based fuzz of the speech endpoints built from it (HTTP and the
WebSocket) finds no 5xx and no internal error."""

from __future__ import annotations

import json
import re
from importlib.metadata import version

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from mlx_speech.http.app import ROUTES
from mlx_speech.http.speech.request import RequestRules, parse_speech_request
from mlx_speech.server import ServerSettings
from tests.tts.support.field_reads import FieldReads
from tests.tts.support.server import RunningServer, assert_speaks

pytestmark = pytest.mark.slow  # a real server, fuzzed


@pytest.fixture(scope="module")
def server(speaking_dir, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir), voices_dir=tmp_path_factory.mktemp("openapi-voices")
    )
    with RunningServer(settings) as running:
        yield running


@pytest.fixture(scope="module")
def document(server) -> dict:
    response = httpx.get(f"{server.url}/openapi.json")
    assert response.status_code == 200
    return response.json()


def _speech_fields(document: dict) -> dict:
    body = document["paths"]["/v1/audio/speech"]["post"]["requestBody"]
    return body["content"]["application/json"]["schema"]["properties"]


def test_every_route_is_described(document):
    described = {
        (path, method.upper())
        for path, operations in document["paths"].items()
        for method in operations
    }
    served = {
        (route.path, method)
        for route in ROUTES
        for method in getattr(route, "methods", None) or ["GET"]  # a WebSocket: GET
        if method != "HEAD"
    }
    assert described == served


def test_the_described_fields_are_the_fields_the_parser_reads(document):
    body = FieldReads(input="Hello.")
    rules = RequestRules(max_ref_bytes=1000)
    parse_speech_request(body, rules)
    assert set(_speech_fields(document)) == body.read
    assert document["paths"]["/v1/audio/speech"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]["required"] == ["input"]


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=0),
    st.integers(min_value=10**300, max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=2),
    st.sampled_from(
        [
            "default",
            "wav",
            "sse",
            "auto",
            "\ud800",
            "file:///etc/passwd",
            "data:audio/wav;base64,AAAA",
            "http://example.invalid/a.wav",
            "A" * 6000,
            "x" * 3000,
        ]
    ),
)


REQUIRED = ("input", "max_new_tokens")


def _bodies(fields: list[str]):
    return st.fixed_dictionaries(
        {
            "input": st.one_of(st.just("Hi."), HOSTILE),
            # Any valid budget stays short; the rest of its values are hostile.
            "max_new_tokens": st.one_of(st.just(2), HOSTILE),
        },
        optional={name: HOSTILE for name in fields if name not in REQUIRED}
        | {"unknown_field": HOSTILE},
    )


def _fuzzing(examples: int):
    """Reproducible runs of ``examples`` bodies, however slow the server."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


def _post(server, route: str, body) -> httpx.Response:
    response = httpx.post(
        f"{server.url}{route}",
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert response.status_code < 500, (body, response.content[:300])
    return response


def test_fuzzed_bodies_never_get_a_5xx(server, document):
    fields = sorted(_speech_fields(document))

    @_fuzzing(150)
    @given(_bodies(fields))
    def check(body):
        response = _post(server, "/v1/audio/speech", body)
        if response.status_code >= 400:
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}

    check()
    assert_speaks(server)


def test_fuzzed_batches_never_get_a_5xx(server, document):
    fields = sorted(_speech_fields(document))
    items = st.one_of(st.lists(_bodies(fields), min_size=1, max_size=3), HOSTILE)
    defaults = {name: HOSTILE for name in fields if name not in REQUIRED}

    @_fuzzing(60)
    @given(st.fixed_dictionaries({"items": items}, optional=defaults))
    def check(body):
        response = _post(server, "/v1/audio/speech/batch", body)
        answer = response.json()
        if response.status_code >= 400:
            assert set(answer["error"]) == {"message", "type", "param", "code"}
        else:
            assert answer["total"] == len(body["items"]) == len(answer["results"])
            for result in answer["results"]:
                assert result["status"] in ("success", "error")

    check()
    assert_speaks(server)


SOCKET_MESSAGES = {"audio.start", "audio.done", "session.done", "error"}


def test_fuzzed_socket_sessions_end_well(server, document):
    """The same bodies as session.config, their input as the text: every
    session ends with session.done or a deliberate close, never an internal
    error, and every message is one of the protocol's."""
    fields = sorted(_speech_fields(document))
    socket_fields = {
        "split_granularity": st.one_of(st.sampled_from(["none", "sentence"]), HOSTILE),
        "stream_audio": st.one_of(st.booleans(), HOSTILE),
        "speaker": HOSTILE,
    }
    url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"

    @_fuzzing(60)
    @given(_bodies(fields), st.fixed_dictionaries({}, optional=socket_fields))
    def check(body, socket_only):
        text = body.pop("input")
        with connect(url) as ws:
            try:  # a refused config may close the socket while the rest is sent
                ws.send(json.dumps({"type": "session.config", **body, **socket_only}))
                ws.send(json.dumps({"type": "input.text", "text": text}))
                ws.send(json.dumps({"type": "input.done"}))
                while True:
                    frame = ws.recv(timeout=60)
                    if isinstance(frame, str):
                        message = json.loads(frame)
                        assert message["type"] in SOCKET_MESSAGES, message
                        if message["type"] == "session.done":
                            return
            except ConnectionClosed as closed:
                assert closed.rcvd is not None and closed.rcvd.code == 1008, closed

    check()
    assert_speaks(server)


def test_every_path_parameter_is_declared(document):
    for path, operations in document["paths"].items():
        named = set(re.findall(r"{(\w+)}", path))
        for method, operation in operations.items():
            declared = {
                p["name"] for p in operation.get("parameters", []) if p["in"] == "path"
            }
            assert declared == named, (path, method)


def test_null_fields_are_described_as_absent_and_read_so(server, document):
    fields = _speech_fields(document)
    optional = [name for name in fields if name != "input"]
    for name in optional:
        assert fields[name]["anyOf"][1]["type"] == "null", name
    nulls = {name: None for name in optional if name != "max_new_tokens"}
    body = {"input": "Hi.", "max_new_tokens": 2, **nulls}
    response = _post(server, "/v1/audio/speech", body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "audio/mpeg"  # the default format


def test_the_document_carries_the_package_version(document):
    assert document["info"]["version"] == version("mlx-speech-server")
