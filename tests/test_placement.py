"""The ``placement`` and ``budget`` sections: the options in order and their form (jobs.rules.placement)."""
from __future__ import annotations

import pytest

from jobs.rules import placement
from jobs.rules.validate import validate_document
from jobfile import config as config_lib


def test_without_a_section_the_only_option_is_the_jobs_own_region_and_strategy():
    cfg = config_lib.from_dict({"topology": {"region": "europe-west4"}, "scheduling": {"strategy": "SPOT"}})
    assert placement.options(cfg) == [placement.Option("europe-west4", "SPOT")]
    assert placement.options(cfg, region="us-east4") == [placement.Option("us-east4", "SPOT")]


def test_options_go_region_by_region_in_the_users_order():
    cfg = config_lib.from_dict({"placement": {"regions": ["us-east4", "us-central1"],
                                              "strategies": ["SPOT", "STANDARD"]}})
    assert [str(o) for o in placement.options(cfg, region="europe-west4")] == [
        "us-east4 SPOT", "us-east4 STANDARD", "us-central1 SPOT", "us-central1 STANDARD"]
    moved = placement.with_option(cfg, placement.Option("us-central1", "SPOT"))
    assert (moved.topology.region, moved.scheduling.strategy) == ("us-central1", "SPOT")


@pytest.mark.parametrize("section, field", [
    ({"placement": {"regions": ["US-CENTRAL1"]}}, "placement.regions[0]"),
    ({"placement": {"regions": ["us-central1", "us-central1"]}}, "placement.regions[1]"),
    ({"placement": {"strategies": ["SPOT", "SPOT"]}}, "placement.strategies[1]"),
    ({"budget": {"max_total": -1}}, "budget.max_total"),
    ({"budget": {"max_per_hour": float("nan")}}, "budget.max_per_hour"),
])
def test_a_malformed_section_is_one_error_naming_the_field(section, field):
    _, report = validate_document({**config_lib.load("local").to_dict(), **section}, check_data=False)
    assert [p.field for p in report.errors] == [field]


def test_an_unknown_strategy_is_refused_when_loading():
    with pytest.raises(config_lib.ConfigError) as exc:
        config_lib.from_dict({"placement": {"strategies": ["CHEAP"]}})
    assert "placement.strategies" in str(exc.value)
