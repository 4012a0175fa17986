"""SearchConfig.to_dict: the plain-data form stored in results and manifests."""

from __future__ import annotations

from dataclasses import asdict, fields

from thoughtloom.search.config import SearchConfig


def test_to_dict_equals_asdict_for_a_customized_config_without_its_bookkeeping() -> None:
    config = SearchConfig(strategy="dfs", breadth=7, beam=2, max_depth=4, seed=11, temperature=0.0)
    whole = asdict(config)
    assert whole.pop("given") == {"strategy", "breadth", "beam", "max_depth", "seed", "temperature"}
    assert config.to_dict() == whole


def test_every_setting_is_a_plain_value_so_the_dict_shares_no_mutable_state() -> None:
    for f in fields(SearchConfig):
        value = getattr(SearchConfig(), f.name)
        if f.name == "given":  # which fields were given: a frozenset, not part of the stored form
            assert isinstance(value, frozenset)
            continue
        assert value is None or type(value) in (str, int, float, bool), f.name
