"""Explicit settings are laid over a task's defaults, in Python as on the command line; never instead of them."""

from __future__ import annotations

import dataclasses
import pickle

from thoughtloom.run.options import spec_from_options
from thoughtloom.run.spec import resolve
from thoughtloom.search.config import SearchConfig
from thoughtloom.tasks.registry import get_task

GAME24 = get_task("game24").search_defaults


def test_a_config_remembers_the_fields_it_was_given() -> None:
    assert SearchConfig(breadth=3).given == {"breadth"}
    assert SearchConfig("dfs", 4).given == {"strategy", "breadth"}
    assert SearchConfig().given == frozenset()


def test_the_given_fields_survive_pickling_and_do_not_change_equality() -> None:
    config = SearchConfig(breadth=3)
    assert pickle.loads(pickle.dumps(config)).given == {"breadth"}
    assert SearchConfig(breadth=3, beam=5) == SearchConfig(breadth=3)  # beam 5 is the default either way


def test_a_python_config_keeps_the_tasks_other_defaults() -> None:
    spec = resolve("4 5 6 10", task="game24", config=SearchConfig(breadth=3))
    assert spec.config.breadth == 3
    assert spec.config.evaluation == GAME24["evaluation"] == "prior"


def test_a_python_config_is_the_run_the_command_line_makes_with_the_same_options() -> None:
    python = resolve("4 5 6 10", task="game24", config=SearchConfig(breadth=3, seed=7))
    cli = spec_from_options({"task": "game24", "problem": "4 5 6 10", "breadth": 3, "seed": 7})
    assert python.config == cli.config
    assert python.config.to_dict() == cli.config.to_dict()


def test_a_field_given_at_its_class_default_still_wins_over_the_task() -> None:
    spec = resolve("4 5 6 10", task="game24", config=SearchConfig(evaluation="value"))
    assert spec.config.evaluation == "value"


def test_keyword_settings_go_on_top_of_the_config() -> None:
    spec = resolve("4 5 6 10", task="game24", config=SearchConfig(breadth=3), search={"breadth": 4, "beam": 2})
    assert (spec.config.breadth, spec.config.beam, spec.config.evaluation) == (4, 2, "prior")


def test_a_config_made_with_every_field_is_used_as_it_is() -> None:
    whole = SearchConfig(**SearchConfig().to_dict())
    spec = resolve("4 5 6 10", task="game24", config=whole)
    assert spec.config.evaluation == "value"  # the class default, given explicitly with every other field


def test_a_replaced_config_counts_every_field_as_given() -> None:
    copied = dataclasses.replace(SearchConfig(breadth=3), beam=2)
    assert copied.given == frozenset(SearchConfig().to_dict())


def test_the_profiles_settings_stay_under_the_given_ones() -> None:
    spec = resolve("Plan a launch", profile="strategic_planning", config=SearchConfig(beam=2))
    assert spec.config.beam == 2  # the profile's is 4
    assert spec.config.max_depth == 10  # the profile's hard depth, not the class default 3
    assert spec.config.max_nodes != SearchConfig().max_nodes  # the profile's
