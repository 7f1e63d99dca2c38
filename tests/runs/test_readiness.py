import httpx

from servepilot.runs.readiness import base_url, probe


def _client(routes):
    def handler(request):
        code, body = routes.get(request.url.path, (404, {}))
        return httpx.Response(code, json=body)

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_health_then_models():
    with _client({"/health": (200, {}), "/v1/models": (200, {"data": [{"id": "kimi"}, {"id": "lora-a"}]})}) as c:
        p = probe("http://x:1", client=c)
    assert p.ready and p.served_models == ("kimi", "lora-a")


def test_no_health_endpoint_falls_back_to_models():
    with _client({"/v1/models": (200, {"data": [{"id": "tiny.gguf"}]})}) as c:
        p = probe("http://x:1", client=c)
    assert p.ready and p.served_models == ("tiny.gguf",)


def test_not_ready_while_health_fails_or_nothing_answers():
    with _client({"/health": (503, {}), "/v1/models": (200, {"data": []})}) as c:
        assert not probe("http://x:1", client=c).ready
    with _client({}) as c:
        assert not probe("http://x:1", client=c).ready

    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    with httpx.Client(transport=httpx.MockTransport(refuse)) as c:
        p = probe("http://x:1", client=c)
    assert not p.ready and "ConnectError" in p.detail


def test_wildcard_binds_are_probed_on_loopback():
    assert base_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert base_url(None, 8000) == "http://127.0.0.1:8000"
    assert base_url("::1", 8000) == "http://[::1]:8000"
    assert base_url("10.0.0.5", 30000) == "http://10.0.0.5:30000"


def test_odd_models_answers_do_not_escape_the_probe():
    # A JSON list, or "data" that is not a list, raised AttributeError/TypeError out of the
    # supervisor loop and left the engine running without a supervisor.
    for body in ([{"id": "x"}], {"data": 5}, {"data": None}, "text"):
        with _client({"/health": (200, {}), "/v1/models": (200, body)}) as c:
            p = probe("http://x:1", client=c)
        assert p.ready and p.served_models == (), body


def test_a_server_that_requires_an_api_key_and_has_no_health_is_ready():
    # llama-cpp-python (no /health) started with --api-key answers /v1/models with 401:
    # it is serving; waiting for a 200 would time out after half an hour.
    with _client({"/v1/models": (401, {"error": "unauthorized"})}) as c:
        p = probe("http://x:1", client=c)
    assert p.ready and p.served_models == ()
    with _client({"/v1/models": (500, {})}) as c:
        assert not probe("http://x:1", client=c).ready
