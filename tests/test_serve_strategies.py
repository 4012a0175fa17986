"""Search as a service: strategies served as OpenAI models (thoughtloom.run.service over thoughtloom.llm.serve),
asked with OpenAI's own client, each search running over the scripted OpenAI-compatible test server."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import openai
import pytest
from inprocess import loom_here
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen, serve
from serving import running

from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import Prompt
from thoughtloom.run.service import ServiceSettings, StrategyService, served_names

QUESTION = "Why is the sky blue?"
ANSWER = "Rayleigh scattering: air scatters blue light more than red."


def reply_to(prompt: str) -> str:
    """What the scripted model writes for a prompt of the general task (chat or completion form) or the research
    flow, by what it asks."""
    if "Hypotheses (" in prompt:
        return "1. Rayleigh scattering - air scatters blue light most.\n2. Ocean - the sky reflects the sea."
    if "\nHypotheses:\n" in prompt:
        return "ANSWER: Rayleigh scattering\nWHY: air scatters blue light most."
    if "\nHypothesis: " in prompt:
        return "1: SUPPORTS 0.9 known"
    if "Give the final answer." in prompt or prompt.endswith("\nFinal answer:"):  # chat / completion forms
        return ANSWER
    if "Evaluate the last step." in prompt:
        return '{"reasoning": "on topic", "score": 8, "is_promising": true}'
    if "Quality of the last step" in prompt:
        return "8"
    return "Sunlight meets the air's molecules. Final answer: " + ANSWER


def scripted(seen: Seen) -> Reply:
    """A chat endpoint answering each prompt by reply_to."""
    n = int(seen.body.get("n") or 1)
    text = reply_to(seen.body["messages"][-1]["content"])
    return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": i, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"} for i in range(n)],
                       "usage": {"prompt_tokens": 30, "completion_tokens": 10 * n, "total_tokens": 30 + 10 * n}})


@pytest.fixture
def model() -> Iterator[FakeOpenAIServer]:
    with serve(FakeOpenAIServer(responder=scripted)) as fake:
        yield fake


def service(fake: FakeOpenAIServer, **settings: Any) -> StrategyService:
    """Served searches over the scripted model: tot and research unless other names are given."""
    values: dict[str, Any] = {"names": ("tot", "research"), "model": f"openai-compatible:{fake.url}@m", **settings}
    return StrategyService(ServiceSettings(**values))


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=scaled(60))


ASK = [{"role": "user", "content": QUESTION}]


def test_models_lists_the_served_strategies(model: FakeOpenAIServer) -> None:
    with running(None, service(model)) as url, client(url) as c:
        assert [m.id for m in c.models.list()] == ["research", "tot"]
        assert c.models.retrieve("tot").id == "tot"


def test_a_strategy_answers_a_chat_request_with_its_searchs_answer(model: FakeOpenAIServer) -> None:
    with running(None, service(model)) as url, client(url) as c:
        reply = c.chat.completions.create(model="tot", messages=ASK)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == ANSWER
    assert reply.choices[0].finish_reason == "stop"
    extra = reply.model_extra or {}
    assert extra["thoughtloom"]["strategy"] == "tree_of_thoughts" and extra["thoughtloom"]["run_id"] is None
    prompts = [seen.body["messages"][-1]["content"] for seen in model.seen]
    # A search, not one completion: steps proposed, evaluated, then the answer written.
    assert any("Evaluate the last step." in p for p in prompts) and prompts[-1].endswith("Give the final answer.")
    spent = sum(30 + 10 * int(seen.body.get("n") or 1) for seen in model.seen)
    assert reply.usage is not None and reply.usage.total_tokens == spent


def test_a_streamed_strategy_sends_its_answer_as_chunks_and_its_run_id(model: FakeOpenAIServer,
                                                                        tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    with running(None, service(model, store=store)) as url, client(url) as c, \
            c.chat.completions.with_streaming_response.create(
                model="tot", messages=ASK, stream=True, stream_options={"include_usage": True}) as response:  # type: ignore[arg-type]
        run_id = response.headers["x-thoughtloom-run-id"]
        chunks = list(response.parse())
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == ANSWER
    finish = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason is not None]
    assert [ch.choices[0].finish_reason for ch in finish] == ["stop"]
    assert (finish[0].model_extra or {})["thoughtloom"]["run_id"] == run_id
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


@dataclass
class ServedScripted(ScriptedBackend):
    """A scripted Backend that is also a model the server can serve (as the embedded one is)."""

    n_ctx: int = 4096
    chat: bool = True

    def prompt_tokens(self, prompt: Prompt, form: str | None = None) -> list[int]:
        return list(range(len(prompt.as_text().split())))


def test_searches_run_on_the_model_the_server_serves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    served = ServedScripted(responder=lambda request, _: reply_to(request.prompt.as_text()))
    store = str(tmp_path / "runs.db")
    searches = StrategyService(ServiceSettings(names=("tot",), model=served, store=store))
    with running(served, searches) as url, client(url) as c:
        assert [m.id for m in c.models.list()] == ["fake:scripted", "tot"]
        raw = c.chat.completions.with_raw_response.create(model="tot", messages=ASK)  # type: ignore[arg-type]
        plain = c.chat.completions.create(model="fake:scripted", messages=ASK)  # type: ignore[arg-type]
    assert raw.parse().choices[0].message.content == ANSWER
    assert plain.choices[0].message.content == reply_to(QUESTION)  # the model itself, one call
    assert len(served.calls) > 2  # the search's calls went to the served model, and the plain one
    shown = loom_here(capsys, "show", raw.headers["x-thoughtloom-run-id"], "--store", store, "--json")
    assert json.loads(shown.stdout)["manifest"]["model"] == "fake:scripted"


def test_research_served_streams_its_synthesis(model: FakeOpenAIServer) -> None:
    with running(None, service(model)) as url, client(url) as c:
        chunks = list(c.chat.completions.create(model="research", messages=ASK, stream=True))  # type: ignore[arg-type]
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == "Rayleigh scattering"
    assert (chunks[-1].model_extra or {})["thoughtloom"]["strategy"] == "research"
    assert any("Hypotheses (" in seen.body["messages"][-1]["content"] for seen in model.seen)


def test_the_run_id_returned_shows_views_and_replays_the_stored_run(model: FakeOpenAIServer, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "runs.db")
    with running(None, service(model, store=store)) as url, client(url) as c:
        raw = c.chat.completions.with_raw_response.create(model="tot", messages=ASK)  # type: ignore[arg-type]
    run_id = raw.headers["x-thoughtloom-run-id"]
    assert (raw.parse().model_extra or {})["thoughtloom"]["run_id"] == run_id
    shown = loom_here(capsys, "show", run_id, "--store", store)
    assert shown.returncode == 0 and QUESTION in shown.stdout
    page = tmp_path / "run.html"
    assert loom_here(capsys, "view", run_id, "--store", store, "--out", str(page)).returncode == 0
    assert QUESTION in page.read_text(encoding="utf-8")
    calls = len(model.seen)
    replayed = loom_here(capsys, "replay", run_id, "--store", store, "--json")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["answer"] == ANSWER
    assert len(model.seen) == calls  # replayed from the record: the model is not asked again


def test_a_requests_budget_is_a_hard_limit_on_its_search(model: FakeOpenAIServer) -> None:
    with running(None, service(model)) as url, client(url) as c:
        c.chat.completions.create(model="tot", messages=ASK)  # type: ignore[arg-type]
        whole = len(model.seen)
        # Each call reserves its prompt and longest reply before it goes out: 1,200 tokens pay for one.
        small = c.chat.completions.create(model="tot", messages=ASK, max_tokens=1_200)  # type: ignore[arg-type]
    assert len(model.seen) - whole == 1 < whole
    assert small.usage is not None and small.usage.total_tokens <= 1_200
    assert (small.model_extra or {})["thoughtloom"]["stop_reason"] == "budget_tokens"
    assert small.choices[0].finish_reason == "length" and small.choices[0].message.content == ""


def test_a_requests_seconds_are_a_hard_limit_and_more_than_the_cap_is_a_400(model: FakeOpenAIServer) -> None:
    model.responder = lambda seen: replace(scripted(seen), delay_s=0.5)  # the search makes 4 calls
    with running(None, service(model, max_seconds=60)) as url, client(url) as c:
        short = c.chat.completions.create(model="tot", messages=ASK,  # type: ignore[arg-type]
                                          extra_body={"thoughtloom": {"budget_seconds": 0.7}})
        with pytest.raises(openai.BadRequestError) as refused:
            c.chat.completions.create(model="tot", messages=ASK,  # type: ignore[arg-type]
                                      extra_body={"thoughtloom": {"budget_seconds": 61}})
    assert (short.model_extra or {})["thoughtloom"]["stop_reason"] == "budget_wall_s"
    assert len(model.seen) < 4
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "thoughtloom.budget_seconds"


def test_a_request_asking_more_than_the_servers_cap_is_a_400_before_any_model_call(
        model: FakeOpenAIServer) -> None:
    with running(None, service(model, max_tokens=1_000)) as url, client(url) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            c.chat.completions.create(model="tot", messages=ASK,  # type: ignore[arg-type]
                                      extra_body={"thoughtloom": {"budget_tokens": 1_001}})
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "budget_exceeded"
    assert error["param"] == "thoughtloom.budget_tokens" and "at most 1,000" in error["message"]
    assert model.seen == []


def test_a_request_cannot_choose_a_setting_the_operator_did_not_offer(model: FakeOpenAIServer) -> None:
    with running(None, service(model)) as url, client(url) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            c.chat.completions.create(model="tot", messages=ASK,  # type: ignore[arg-type]
                                      extra_body={"thoughtloom": {"model": "openai:gpt-4o"}})
        with pytest.raises(openai.BadRequestError) as tools:
            c.chat.completions.create(model="research", messages=ASK,  # type: ignore[arg-type]
                                      tools=[{"type": "function", "function": {"name": "shell"}}])
    assert isinstance(refused.value.body, dict) and refused.value.body["param"] == "thoughtloom.model"
    assert isinstance(tools.value.body, dict) and tools.value.body["param"] == "tools"
    assert model.seen == []


def test_an_unknown_model_is_a_404_naming_the_served_ones(model: FakeOpenAIServer) -> None:
    with running(None, service(model)) as url, client(url) as c:
        with pytest.raises(openai.NotFoundError) as refused:
            c.chat.completions.create(model="agent", messages=ASK)  # type: ignore[arg-type]
    assert isinstance(refused.value.body, dict) and refused.value.body["code"] == "model_not_found"
    assert "research, tot" in refused.value.body["message"]


def test_searches_past_the_limit_at_once_are_503s(model: FakeOpenAIServer) -> None:
    model.responder = lambda seen: replace(scripted(seen), delay_s=0.3)
    with running(None, service(model, max_runs=1)) as url, client(url) as c:
        answered: list[str | None] = []
        first = threading.Thread(target=lambda: answered.append(
            c.chat.completions.create(model="tot", messages=ASK).choices[0].message.content))  # type: ignore[arg-type]
        first.start()
        while not model.seen:
            time.sleep(0.01)
        with pytest.raises(openai.InternalServerError) as busy:
            c.chat.completions.create(model="tot", messages=ASK)  # type: ignore[arg-type]
        first.join(scaled(60))
    assert busy.value.status_code == 503
    assert isinstance(busy.value.body, dict) and busy.value.body["code"] == "too_many_searches"
    assert answered == [ANSWER]


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_disconnects_cancels_its_search(model: FakeOpenAIServer, stream: bool) -> None:
    model.responder = lambda seen: replace(scripted(seen), delay_s=0.5)  # the search makes 4 calls
    searches = service(model)
    with running(None, searches) as url:
        host = url.removeprefix("http://").removesuffix("/v1")
        body = json.dumps({"model": "tot", "messages": ASK, "stream": stream}).encode()
        with socket.create_connection(tuple(host.split(":")), timeout=scaled(30)) as sock:  # type: ignore[arg-type]
            sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            if stream:
                head = sock.recv(65536)
                assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
            while not model.seen:
                time.sleep(0.01)
        hung_up = time.monotonic()
        while searches._running and time.monotonic() - hung_up < scaled(20):
            time.sleep(0.02)
        assert searches._running == 0
    assert len(model.seen) == 1  # the call on its way when the client left, and none after


def test_served_names_are_the_strategies_that_fit_a_free_form_problem() -> None:
    assert set(served_names("tot,research,cove")) == {"tot", "research", "cove"}
    every = served_names("all")
    assert "agent" not in every and {"tot", "tree_of_thoughts", "bfs", "research", "cove"} <= set(every)
    with pytest.raises(ValueError, match="'agent' is not a strategy that can be served"):
        served_names("agent")


def test_an_unknown_strategy_to_serve_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str],
                                                                model: FakeOpenAIServer) -> None:
    proc = loom_here(capsys, "serve", "--model", f"openai-compatible:{model.url}@m", "--strategies", "tot,nope")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--strategies: 'nope' is not a strategy" in proc.stderr


def test_a_store_without_strategies_is_a_one_line_usage_error_before_the_model_loads(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    proc = loom_here(capsys, "serve", "--store", str(tmp_path / "runs.db"), "--port", "0")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--store is a setting of served searches; add --strategies" in proc.stderr


def test_a_profile_without_strategies_is_a_one_line_usage_error_before_the_model_loads(
        capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "serve", "--profile", "research_synthesis", "--port", "0")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--profile is a setting of served searches; add --strategies" in proc.stderr


def test_an_unknown_profile_to_serve_with_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str],
                                                                   model: FakeOpenAIServer) -> None:
    proc = loom_here(capsys, "serve", "--model", f"openai-compatible:{model.url}@m", "--strategies", "tot",
                     "--profile", "nope", "--port", "0")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--profile: unknown profile 'nope'; choose one of: default" in proc.stderr


def test_a_remote_model_without_its_key_is_a_one_line_usage_error_before_serving(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    proc = loom_here(capsys, "serve", "--model", "openai:gpt-4o-mini", "--strategies", "tot", "--port", "0")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "OPENAI_API_KEY is not set" in proc.stderr


@contextmanager
def loom_serve_tot(model: FakeOpenAIServer, store: Path, *flags: str) -> Iterator[Any]:
    """A real `loom serve --strategies tot --store STORE` over the scripted model, asked "tot" once: the raw reply.
    The server is stopped with Ctrl-C after, and must exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "thoughtloom", "serve", "--port", "0", "--model",
                             f"openai-compatible:{model.url}@m", "--strategies", "tot", "--store", str(store), *flags],
                            cwd=Path(__file__).parents[1], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("serving tot at http://127.0.0.1:"), line or proc.communicate()[1]
        with client(line.split()[-1]) as c:
            yield c.chat.completions.with_raw_response.create(model="tot", messages=ASK)  # type: ignore[arg-type]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=scaled(30))
    assert proc.returncode == 0, err


def test_loom_serve_strategies_over_a_remote_model_answers_an_openai_client(model: FakeOpenAIServer,
                                                                          tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    with loom_serve_tot(model, store) as raw:
        assert raw.parse().choices[0].message.content == ANSWER
        assert raw.headers["x-thoughtloom-run-id"]
    assert store.exists()


def test_a_profile_no_served_search_can_run_with_is_a_one_line_usage_error_at_start(
        capsys: pytest.CaptureFixture[str], model: FakeOpenAIServer) -> None:
    proc = loom_here(capsys, "serve", "--model", f"openai-compatible:{model.url}@m", "--strategies", "tot",
                     "--profile", "research_synthesis", "--port", "0")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot run with these settings: profile research_synthesis requires citations" in proc.stderr
    assert not model.seen


def test_loom_serve_runs_every_served_search_with_the_operators_profile(model: FakeOpenAIServer,
                                                                      tmp_path: Path) -> None:
    from thoughtloom.store.runs import open_run
    from thoughtloom.store.sqlite import SQLiteStore

    store = tmp_path / "runs.db"
    with loom_serve_tot(model, store, "--profile", "strategic_planning") as raw:
        run_id = raw.headers["x-thoughtloom-run-id"]
    with SQLiteStore(str(store)) as opened:
        assert open_run(opened, run_id).manifest.profile == "strategic_planning"
