"""SearchConfig.to_dict: the plain-data form stored in results and manifests."""

from __future__ import annotations

from dataclasses import asdict, fields

from thoughtloom.search.config import SearchConfig


def test_to_dict_equals_asdict_for_a_customized_config() -> None:
    config = SearchConfig(strategy="dfs", breadth=7, beam=2, max_depth=4, seed=11, temperature=0.0)
    assert config.to_dict() == asdict(config)


def test_every_field_is_a_plain_value_so_the_dict_shares_no_mutable_state() -> None:
    for f in fields(SearchConfig):
        value = getattr(SearchConfig(), f.name)
        assert value is None or type(value) in (str, int, float, bool), f.name
