"""Valid replies as choices: scored from the model's distribution, chosen by chance in the control, asked again when all are rejected."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.cache import MemoryCache, digest, sample_key
from thoughtloom.llm.chance import ChanceBackend
from thoughtloom.llm.errors import ModelError
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import GenerateRequest, Prompt, Usage, choice_text, parse_choice_text
from thoughtloom.search import SearchConfig, search
from thoughtloom.tasks import get_task
from thoughtloom.tasks.game24 import Game24, legal_steps

PROMPT = Prompt(text="Pick one:")
WORDS = ("sure", "likely", "impossible")


# --- the reply of a scoring call -------------------------------------------------------------


def test_choice_text_round_trips_to_a_normalized_distribution():
    odds = parse_choice_text(choice_text({"sure": math.log(0.2), "likely": math.log(0.6)}), WORDS)
    # Log-probabilities are kept to four decimals.
    assert odds == pytest.approx({"sure": 0.25, "likely": 0.75, "impossible": 0.0}, rel=1e-4)


def test_choice_text_keeps_choices_whose_probability_underflows():
    odds = parse_choice_text(choice_text({"a": -900.0, "b": -901.0}), ("a", "b"))
    assert odds is not None and odds["a"] > odds["b"] > 0


def test_a_reply_that_is_not_a_distribution_parses_to_none():
    assert parse_choice_text("sure", WORDS) is None
    assert parse_choice_text('{"other": 0}', WORDS) is None


def test_score_choices_needs_choices_and_one_sample():
    with pytest.raises(ValueError, match="score_choices"):
        GenerateRequest(PROMPT, score_choices=True)
    with pytest.raises(ValueError, match="score_choices"):
        GenerateRequest(PROMPT, n=2, choices=WORDS, score_choices=True)


# --- the gateway -----------------------------------------------------------------------------


def test_cache_keys_tell_a_scored_call_from_a_sampled_one_and_from_a_plain_one():
    plain = GenerateRequest(PROMPT)
    sampled = GenerateRequest(PROMPT, choices=WORDS)
    scored = GenerateRequest(PROMPT, choices=WORDS, score_choices=True)
    keys = {digest(sample_key("m", r, 0)) for r in (plain, sampled, scored)}
    assert len(keys) == 3


async def test_a_scoring_call_reserves_room_for_reading_every_choice():
    model = ScriptedBackend(default=choice_text({"sure": 0.0}), scores_choices=True)
    prompt_words = model.count_tokens(PROMPT)
    choice_bytes = sum(len(w) for w in WORDS)
    # The prompt, every choice's bytes and the one reserved reply token fit exactly; one token more does not.
    gateway = Gateway(model, BudgetLimits(tokens=prompt_words + choice_bytes + 1))
    await gateway.generate(GenerateRequest(PROMPT, choices=WORDS, score_choices=True, max_tokens=1))
    tight = Gateway(model, BudgetLimits(tokens=prompt_words + choice_bytes + 1))
    with pytest.raises(Exception, match="budget"):
        await tight.generate(GenerateRequest(PROMPT, choices=WORDS, score_choices=True, max_tokens=2))


async def test_requests_for_token_logprobs_are_never_answered_from_the_cache():
    model = ScriptedBackend(default="x")
    gateway = Gateway(model, BudgetLimits(tokens=10_000), cache=MemoryCache())
    await gateway.generate(GenerateRequest(PROMPT, seed=1))
    await gateway.generate(GenerateRequest(PROMPT, seed=1, logprobs=2))
    await gateway.generate(GenerateRequest(PROMPT, seed=1))
    assert len(model.calls) == 2  # the plain repeat came from the cache, the logprobs one did not


def test_the_gateway_says_whether_its_backend_scores_choices():
    assert Gateway(ScriptedBackend(scores_choices=True)).scores_choices
    assert not Gateway(ScriptedBackend()).scores_choices


# --- the chance control ----------------------------------------------------------------------


async def test_chance_samples_only_among_the_choices():
    backend = ChanceBackend(seed=3)
    got = await backend.generate(GenerateRequest(PROMPT, n=20, choices=WORDS))
    assert set(got.texts) <= set(WORDS) and len(set(got.texts)) > 1


async def test_chance_gives_a_seeded_request_the_same_answer_every_time():
    request = GenerateRequest(PROMPT, choices=WORDS, score_choices=True, seed=7)
    first, again = ChanceBackend(seed=1), ChanceBackend(seed=2)
    assert (await first.generate(request)).texts == (await again.generate(request)).texts


async def test_chance_scores_are_a_distribution_over_the_choices():
    got = await ChanceBackend().generate(GenerateRequest(PROMPT, choices=WORDS, score_choices=True))
    odds = parse_choice_text(got.texts[0], WORDS)
    assert odds is not None and sum(odds.values()) == pytest.approx(1.0)


async def test_chance_counts_tokens_with_the_model_it_stands_in_for():
    counter = ScriptedBackend()  # counts words
    got = await ChanceBackend(counter).generate(GenerateRequest(Prompt(text="one two three"), choices=WORDS,
                                                                score_choices=True))
    # The counter has no choice tokenizer: each choice is estimated at a token per four bytes, at least one.
    assert got.usage == Usage(3 + sum(max(1, len(w) // 4) for w in WORDS), 0)


async def test_chance_refuses_a_request_without_choices_in_one_line():
    with pytest.raises(ModelError, match="lists none") as err:
        await ChanceBackend().generate(GenerateRequest(PROMPT, purpose="generate"))
    assert "\n" not in str(err.value)


# --- game24 lists its legal steps ------------------------------------------------------------


def test_legal_steps_are_every_distinct_step_and_each_is_valid_without_repair():
    task = Game24()
    problem = task.parse_problem("4 5 6 10")
    steps = legal_steps(problem)
    assert len(steps) == 36  # 6 pairs x (+, *, - both ways, / both ways)
    assert all(task.validate(problem, (), s).ok and not task.validate(problem, (), s).repaired for s in steps)


def test_legal_steps_skip_division_by_zero_and_repeat_no_step():
    steps = legal_steps((Fraction(0), Fraction(3), Fraction(3)))
    assert not any(s.startswith(("3 / 0", "0 / 0")) for s in steps)
    assert "0 / 3 = 0" in steps
    assert len(steps) == len(set(steps))


def test_game24_prompts_list_their_choices():
    task = Game24()
    problem = task.parse_problem("4 5 6 10")
    assert task.propose(problem, (), 5).choices == legal_steps(problem)
    assert task.value(problem, ()).choices == WORDS


# --- the search on a scoring model -----------------------------------------------------------


def favourite_first(favourites: dict[str, float]) -> ScriptedBackend:
    """A scoring fake: the legal steps named in `favourites` get those probabilities, the others a little."""

    def respond(request: GenerateRequest, index: int) -> str:
        if not request.score_choices:
            raise AssertionError("a scoring model was asked to sample")
        return choice_text({c: math.log(favourites.get(c, 1e-3)) for c in request.choices})

    return ScriptedBackend(responder=respond, scores_choices=True)


async def test_prior_evaluation_takes_the_models_likeliest_steps_and_makes_no_value_call():
    model = favourite_first({"4 * 6 = 24": 0.5, "10 - 5 = 5": 0.25})
    gateway = Gateway(model, BudgetLimits(tokens=100_000))
    result = await search(get_task("game24"), "4 5 6 10", gateway,
                          SearchConfig(breadth=2, beam=1, max_depth=1, evaluation="prior", one_pass=True))
    scores = {n.content: n.score for n in result.graph if n.kind.value != "input"}
    assert scores == pytest.approx({"4 * 6 = 24 (left: 5 10 24)": 1.0, "10 - 5 = 5 (left: 4 5 6)": 0.5}, rel=1e-4)
    assert {r.purpose for r in model.calls} == {"generate"}


async def test_prior_evaluation_keeps_the_exact_value_of_a_finished_state():
    model = favourite_first({"1 * 1 = 1": 0.9, "1 * 4 = 4": 0.9, "6 - 4 = 2": 0.9, "4 * 6 = 24": 0.05})
    gateway = Gateway(model, BudgetLimits(tokens=100_000))
    result = await search(get_task("game24"), "1 1 4 6", gateway,
                          SearchConfig(breadth=2, beam=1, max_depth=3, evaluation="prior", one_pass=True))
    scores = {n.content: n.score for n in result.graph}
    assert scores["4 * 6 = 24 (left: 24)"] == 1.0 and scores["6 - 4 = 2 (left: 2)"] == 0.0
    assert result.solved


async def test_value_evaluation_on_a_scoring_model_takes_the_expected_verdict():
    def respond(request: GenerateRequest, index: int) -> str:
        if request.purpose == "evaluate":
            return choice_text({"sure": math.log(0.5), "likely": math.log(0.5), "impossible": -50.0})
        return choice_text({c: 0.0 if c.startswith("4 + 5") else -9.0 for c in request.choices})

    model = ScriptedBackend(responder=respond, scores_choices=True)
    result = await search(get_task("game24"), "4 5 6 10", Gateway(model, BudgetLimits(tokens=100_000)),
                          SearchConfig(breadth=1, beam=1, max_depth=1, evaluation="value", one_pass=True))
    (child,) = [n for n in result.graph if n.kind.value != "input"]
    assert child.score == pytest.approx(0.5 * 1.0 + 0.5 * 0.3)


# --- no early give-up ------------------------------------------------------------------------


def rejecting_first(bad_replies: int) -> ScriptedBackend:
    """A sampling game24 fake whose first propose replies use numbers that are not there."""
    replies = iter(["99 + 1 = 100 (left: 100)"] * bad_replies)

    def respond(request: GenerateRequest, index: int) -> str:
        if request.purpose == "evaluate":
            return "sure"
        return next(replies, "4 * 6 = 24 (left: 5 10 24)")

    return ScriptedBackend(responder=respond)


async def test_a_backend_that_cannot_keep_to_choices_is_sent_none():
    model = rejecting_first(0)
    await search(get_task("game24"), "4 5 6 10", Gateway(model, BudgetLimits(tokens=100_000)),
                 SearchConfig(breadth=1, beam=1, max_depth=1, one_pass=True))
    assert model.calls and all(r.choices == () for r in model.calls)


async def test_a_backend_whose_samples_keep_to_choices_is_sent_them():
    model = rejecting_first(0)
    model.follows_choices = True
    await search(get_task("game24"), "4 5 6 10", Gateway(model, BudgetLimits(tokens=100_000)),
                 SearchConfig(breadth=1, beam=1, max_depth=1, one_pass=True))
    propose = next(r for r in model.calls if r.purpose == "generate")
    assert propose.choices == legal_steps(Game24().parse_problem("4 5 6 10"))


async def test_an_expansion_whose_proposals_are_all_rejected_is_asked_again_hotter():
    model = rejecting_first(1)
    result = await search(get_task("game24"), "4 5 6 10", Gateway(model, BudgetLimits(tokens=100_000)),
                          SearchConfig(breadth=1, beam=1, max_depth=1, temperature=0.5, one_pass=True))
    asks = [r for r in model.calls if r.purpose == "generate"]
    assert [r.temperature for r in asks] == [0.5, pytest.approx(0.8)]
    assert result.stats.reasks == 1 and result.stats.rejected == 1 and result.score == 1.0


async def test_asking_again_stops_after_the_configured_reasks():
    model = rejecting_first(100)
    result = await search(get_task("game24"), "4 5 6 10", Gateway(model, BudgetLimits(tokens=100_000)),
                          SearchConfig(breadth=1, beam=1, max_depth=1, reasks=3, one_pass=True))
    assert len([r for r in model.calls if r.purpose == "generate"]) == 1 + 3
    assert result.stats.reasks == 3


async def test_zero_reasks_gives_a_rejected_expansion_up_at_once():
    model = rejecting_first(100)
    result = await search(get_task("game24"), "4 5 6 10", Gateway(model, BudgetLimits(tokens=100_000)),
                          SearchConfig(breadth=1, beam=1, max_depth=1, reasks=0, one_pass=True))
    assert len([r for r in model.calls if r.purpose == "generate"]) == 1
    assert result.stats.reasks == 0 and result.answer is None


def test_reasks_below_zero_is_refused():
    with pytest.raises(ValueError, match="reasks must be >= 0"):
        SearchConfig(reasks=-1)


async def test_no_reask_when_the_reply_held_no_step_at_all():
    model = ScriptedBackend(responder=lambda r, i: "sure" if r.purpose == "evaluate" else "")
    await search(get_task("game24"), "4 5 6 10", Gateway(model, BudgetLimits(tokens=100_000)),
                 SearchConfig(breadth=1, beam=1, max_depth=1, one_pass=True))
    assert len(model.calls) == 1


async def test_asking_again_stays_within_the_budget():
    model = rejecting_first(100)
    budget = BudgetLimits(tokens=model.count_tokens(Game24().propose(Game24().parse_problem("4 5 6 10"), (), 1).prompt)
                          + 300)
    result = await search(get_task("game24"), "4 5 6 10", Gateway(model, budget),
                          SearchConfig(breadth=1, beam=1, max_depth=1, one_pass=True))
    assert result.usage.total_tokens <= budget.tokens
    assert result.termination_reason.startswith("budget")
