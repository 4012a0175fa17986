"""OpenTelemetry spans (the optional `otel` extra): a search, its model calls and tool calls, by the GenAI conventions.

Recorded with the SDK's in-memory exporter; the whole file is skipped without opentelemetry-sdk.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_search import game24_model as scripted_game24

from thoughtloom.api import asolve
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.errors import ModelError
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.tracing import TracedBackend, model_of, traced
from thoughtloom.llm.types import GenerateRequest, Prompt
from thoughtloom.tools.registry import build_toolbox

ONE_PATH = {"4 5 6 10": "10 - 4 = 6 (left: 5 6 6)", "5 6 6": "5 * 6 = 30 (left: 6 30)", "6 30": "30 - 6 = 24 (left: 24)"}

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Finished spans of this test, from the process's one TracerProvider (OTel allows setting it once)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


async def test_a_run_is_one_invoke_agent_span_with_its_model_calls_inside(spans: InMemorySpanExporter) -> None:
    result = await asolve("4 5 6 10", task="game24", model=scripted_game24(ONE_PATH), controller=False,
                          budget=BudgetLimits(tokens=100_000), strategy="bfs")
    finished = spans.get_finished_spans()
    (search,) = [s for s in finished if s.name.startswith("invoke_agent")]
    assert search.name == "invoke_agent thoughtloom bfs"
    assert search.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert search.attributes["thoughtloom.stop_reason"] == "goal_reached"
    assert search.attributes["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    calls = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "text_completion"]
    assert len(calls) == result.usage.calls
    assert all(c.parent is not None and c.parent.span_id == search.context.span_id for c in calls)
    assert {c.attributes["thoughtloom.purpose"] for c in calls} >= {"generate", "evaluate"}


async def test_a_model_call_span_carries_the_genai_request_and_usage_attributes(
    spans: InMemorySpanExporter,
) -> None:
    backend = traced(ScriptedBackend(default="four words of text"))
    assert isinstance(backend, TracedBackend)
    await backend.generate(GenerateRequest(Prompt("x"), n=2, max_tokens=32, temperature=0.5, seed=7))
    (call,) = spans.get_finished_spans()
    assert call.name == "text_completion scripted"
    assert call.kind == trace.SpanKind.INTERNAL
    attributes = dict(call.attributes)
    assert attributes["gen_ai.provider.name"] == "fake"
    assert (attributes["gen_ai.request.max_tokens"], attributes["gen_ai.request.temperature"],
            attributes["gen_ai.request.choice.count"], attributes["gen_ai.request.seed"]) == (32, 0.5, 2, 7)
    assert attributes["gen_ai.usage.output_tokens"] > 0 and attributes["gen_ai.usage.input_tokens"] > 0


async def test_a_failed_model_call_span_is_an_error_with_its_type(spans: InMemorySpanExporter) -> None:
    backend = traced(ScriptedBackend(default="ok", failures=[ModelError("bad request")]))
    with pytest.raises(ModelError):
        await backend.generate(GenerateRequest(Prompt("x")))
    (call,) = spans.get_finished_spans()
    assert call.status.status_code == trace.StatusCode.ERROR
    assert call.attributes["error.type"] == "ModelError"


async def test_each_tool_run_is_an_execute_tool_span(spans: InMemorySpanExporter) -> None:
    box = await build_toolbox(["calc"])
    try:
        result = await box.call("calc", {"expression": "6 * 4"})
    finally:
        await box.aclose()
    assert result.status == "ok"
    (tool,) = spans.get_finished_spans()
    assert tool.name == "execute_tool calc"
    assert (tool.attributes["gen_ai.operation.name"], tool.attributes["gen_ai.tool.name"]) == ("execute_tool", "calc")


def test_the_model_is_read_from_the_backend_name() -> None:
    assert model_of("openai-compatible:http://h:1/v1@qwen#completions") == ("openai-compatible", "qwen")
    assert model_of("local:gemma-3-270m") == ("local", "gemma-3-270m")


def test_without_opentelemetry_nothing_is_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    from thoughtloom.llm import tracing
    from thoughtloom.tools.builtin import CalcTool
    from thoughtloom.tools.traced import traced_tools

    monkeypatch.setattr(tracing, "trace", None)
    backend = ScriptedBackend(default="ok")
    tool = CalcTool()
    assert traced(backend) is backend
    assert traced_tools([tool]) == [tool]


@pytest.mark.parametrize("lane", ["io", "cot", "cot_sc"])
async def test_a_bench_sampling_lane_is_one_invoke_agent_span_with_its_model_calls_inside(
    spans: InMemorySpanExporter, lane: str,
) -> None:
    from thoughtloom.eval.datasets import given_problems
    from thoughtloom.eval.lanes import run_lane

    dataset = given_problems("4 9 10 13", task="game24")
    outcome, spend = await run_lane(lane, dataset, dataset.problems[0], ScriptedBackend(default="(10 - 4) * (13 - 9) = 24"),
                                    BudgetLimits(tokens=50_000), params={"k": 3} if lane == "cot_sc" else {},
                                    temperature=0.7, seed=1)
    assert outcome.error is None
    finished = spans.get_finished_spans()
    (run,) = [s for s in finished if s.name.startswith("invoke_agent")]
    assert run.name == f"invoke_agent thoughtloom {lane}"
    assert (run.attributes["thoughtloom.lane"], run.attributes["thoughtloom.dataset"]) == (lane, "game24")
    assert run.attributes["gen_ai.usage.output_tokens"] == spend.output_tokens > 0
    calls = [s for s in finished if s.attributes.get("gen_ai.operation.name") == "text_completion"]
    assert len(calls) == spend.calls >= 1
    assert all(c.parent is not None and c.parent.span_id == run.context.span_id for c in calls)
