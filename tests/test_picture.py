"""The dashboard picture's pure part (awide_harness/picture.py): the panels it draws are the
dashboard's main ones, and every query it sends is one of the dashboard's, read from
monitoring/dashboard.json. (Drawing it needs the cluster and Prometheus: `make picture`.)"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awide_harness.picture import (
    LAST_VALUES,
    PICTURE_PANELS,
    PictureError,
    dashboard_panels,
    for_cluster,
    legend,
    load_dashboard,
    picture_panels,
)
from tests.test_monitoring import dashboard_exprs


def test_every_query_the_picture_sends_is_a_dashboard_query():
    exprs = [q.expr for p in picture_panels(load_dashboard()) for q in p.queries]
    assert exprs, "the picture draws something"
    assert set(exprs) <= set(dashboard_exprs())
    # each panel with all its queries, as in the dashboard
    panels = dashboard_panels(load_dashboard())
    for p in picture_panels(load_dashboard()):
        assert p == panels[p.title]


def test_the_picture_draws_the_main_panels():
    titles = set(PICTURE_PANELS)
    exprs = " ".join(q.expr for p in picture_panels(load_dashboard()) for q in p.queries)
    # cards in service, slot table, gateways' agreement and staleness, leader and its
    # changes, etcd health
    for metric in ("awide_gateway_slots_in_service", "awide_cards",
                   "awide_gateway_card_in_service", "awide_gateway_registry_generation",
                   "awide_registry_generation", "awide_gateway_staleness_seconds",
                   "awide_is_leader", "awide_leader_changes_total", "etcd_server_has_leader",
                   "awide_etcd_voting_members"):
        assert metric in exprs, metric
    assert set(LAST_VALUES) <= titles
    assert len(titles) == len(PICTURE_PANELS)


def test_a_dashboard_without_a_main_panel_is_named():
    doc = copy.deepcopy(load_dashboard())
    doc["panels"] = [p for p in doc["panels"] if p.get("title") != "Slot table"]
    with pytest.raises(PictureError, match="no panel titled 'Slot table'"):
        picture_panels(doc)


def test_a_bad_dashboard_is_named():
    with pytest.raises(PictureError, match="two panels are titled 'x'"):
        dashboard_panels({"panels": [{"title": "x", "targets": [{"expr": "up"}]}] * 2})
    with pytest.raises(PictureError, match="panel 'x' has a query without expr"):
        dashboard_panels({"panels": [{"title": "x", "targets": [{"refId": "A"}]}]})
    with pytest.raises(PictureError, match="'panels' is not a list"):
        dashboard_panels({"panels": {}})


def test_rows_nested_panels_are_found():
    doc = {"panels": [{"type": "row", "title": "r", "panels": [
        {"title": "in", "type": "stat", "targets": [{"refId": "A", "expr": "up"}]}]}]}
    assert list(dashboard_panels(doc)) == ["in"]


def test_legend_and_cluster_variable():
    assert legend("{{host}}/{{card_name}} {{card}}",
                  {"host": "s1", "card_name": "c0", "card": "ab"}) == "s1/c0 ab"
    assert legend("stale {{ gateway }}", {"gateway": "g"}) == "stale g"
    assert legend("", {"__name__": "up", "job": "j", "a": "1"}) == '{a="1", job="j"}'
    assert for_cluster('up{cluster=~"$cluster"}', "tour") == 'up{cluster=~"tour"}'
    assert for_cluster('up{cluster=~"$cluster"}', "a.b") == 'up{cluster=~"a\\\\.b"}'


@given(st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
                       st.text(max_size=10), min_size=1, max_size=4))
def test_legend_names_every_label_it_is_given(labels):
    fmt = " ".join("{{" + k + "}}" for k in labels)
    assert legend(fmt, labels) == " ".join(labels.values()).strip()

