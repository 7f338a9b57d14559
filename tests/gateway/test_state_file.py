"""The gateway's state file, without etcd: written atomically and privately, read back, and
refused with a clear line when it is corrupt, of another cluster, of an old lineage, too old,
or saved in the future."""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import replace
from pathlib import Path

import pytest

from awide_cluster.contract import keys
from awide_cluster.contract import registry as regdoc
from awide_cluster.contract import slots as slotfn
from awide_cluster.contract.records import LayoutRecord
from awide_gateway_cluster import state_file as sf
from awide_gateway_cluster.config import ConfigError
from awide_gateway_cluster.follower import FollowStep
from awide_gateway_cluster.state_keeping import SERVED_SHOWN, StateKeeping
from tests.gateway.support import make_card
from tests.gateway.test_pure import cfg

NOW = 1_764_750_000.0
DAY = 86400.0


def _reg(cluster: str = "c1", lineage: str = "0123456789ab", gen: int = 7) -> regdoc.Registry:
    cards = tuple(make_card(k, admitted=k) for k in (1, 2, 3))
    return regdoc.Registry(cluster=cluster, generation=gen, leader="s1", cards=cards,
                           slots=regdoc.slot_table(cards, slotfn.EMPTY),
                           lineage=lineage)


def _saved(**over: object) -> sf.SavedState:
    reg = _reg()
    base = sf.SavedState(cluster="c1", prefix=keys.prefix("c1"), gateway="gpu1-pod",
                         registry=reg, layout=LayoutRecord("ns-1", "dialog", created_by="g"),
                         saved_at=NOW - 60)
    return replace(base, **over)  # type: ignore[arg-type]


def _read(path: Path, **kw: object) -> sf.SavedState | str:
    args: dict = {"cluster": "c1", "now": NOW, "max_age": DAY, **kw}
    return sf.read(path, **args)


def test_written_atomically_privately_and_read_back(tmp_path: Path) -> None:
    path = sf.path_for(tmp_path / "state", "gpu1-pod")
    sf.write(path, _saved())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sorted(os.listdir(path.parent)) == [path.name]          # no temp file left
    got = _read(path)
    assert isinstance(got, sf.SavedState), got
    assert got == _saved()
    assert got.registry.slots == _reg().slots and got.lineage == "0123456789ab"
    sf.write(path, _saved(registry=_reg(gen=8)))                  # replaced in place
    again = _read(path)
    assert isinstance(again, sf.SavedState) and again.generation == 8


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    assert _read(tmp_path / "none.json") == f"no state file at {tmp_path / 'none.json'}"


def _doc(**over: object) -> bytes:
    d = json.loads(sf.encode(_saved()))
    d.update(over)
    return json.dumps(d).encode()


@pytest.mark.parametrize("raw,words", [
    (b"{\"kind\": \"awide-gateway-state\", \"sch", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    (b" " * (sf.MAX_BYTES + 1), "over the bound"),
    (_doc(kind="other"), "kind is not"),
    (_doc(schema=2), "schema 2 is not known"),
    (_doc(registry="{\"schema\": 1}"), "registry:"),
    (_doc(registry=regdoc.encode(_reg()).decode().replace("\"in\"", "\"maybe\"", 1)),
     "registry:"),
    (_doc(generation=9), "does not match its registry"),
    (_doc(lineage="ffffffffffff"), "does not match its registry"),
    (_doc(cluster="c2"), "does not match its registry"),
    (_doc(layout="{\"schema\": 1}"), "layout:"),
    (_doc(saved_at="yesterday"), "field saved_at"),
])
def test_a_corrupt_file_is_refused_naming_why(tmp_path: Path, raw: bytes, words: str) -> None:
    path = tmp_path / "gw.state.json"
    path.write_bytes(raw)
    got = _read(path)
    assert isinstance(got, str) and got.startswith(f"state file {path} refused: "), got
    assert words in got and "\n" not in got


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    sf.write(real, _saved())
    link = tmp_path / "link.json"
    link.symlink_to(real)
    got = _read(link)
    assert isinstance(got, str) and "unreadable" in got


def test_another_clusters_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gw.state.json"
    sf.write(path, _saved(cluster="c2", prefix=keys.prefix("c2"),
                          registry=_reg(cluster="c2")))
    got = _read(path)
    assert isinstance(got, str)
    assert "belongs to cluster c2 (prefix /awide/c2/)" in got and "cluster c1" in got
    sf.write(path, _saved(prefix="/other/c1/"))
    assert "prefix /other/c1/" in str(_read(path))


def test_an_old_lineage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gw.state.json"
    sf.write(path, _saved())
    got = _read(path, known=_reg(lineage="fedcba987654", gen=2))
    assert isinstance(got, str)
    assert ("lineage 0123456789ab, the registry known is of lineage fedcba987654" in got
            and "old lineage" in got)
    assert isinstance(_read(path, known=_reg(gen=3)), sf.SavedState)     # same lineage


def test_a_file_too_old_or_from_the_future_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gw.state.json"
    sf.write(path, _saved(saved_at=NOW - DAY - 5))
    got = _read(path)
    assert isinstance(got, str) and f"{DAY + 5:.0f} s old, over the limit of 86400 s" in got
    assert isinstance(_read(path, max_age=2 * DAY), sf.SavedState)
    sf.write(path, _saved(saved_at=NOW + 3600))
    assert "3600 s in the future" in str(_read(path))


def test_config_state_section() -> None:
    c = cfg()
    assert c.state.dir is None and c.state.max_age == 86400.0
    c = cfg(state={"dir": "/var/lib/awide-gateway", "max_age": 600})
    assert c.state.dir == Path("/var/lib/awide-gateway") and c.state.max_age == 600
    with pytest.raises(ConfigError) as err:
        cfg(state={"dir": "state"})
    assert err.value.field == "state.dir" and "not an absolute path" in err.value.reason


def test_the_record_says_the_state_file_was_served_while_and_for_a_while_after() -> None:
    keeping = StateKeeping(cfg(), 0.5)
    assert keeping.record_fields(NOW) == {}
    saved = replace(_saved(), saved_at=time.time() - 60)
    first = FollowStep("failed", detail="registry not read: etcd did not answer")
    assert keeping.serve(saved, first, etcd_registry=None,
                         layout=LayoutRecord("ns-1", "dialog"), layout_ok=False)
    during = keeping.record_fields(time.time())
    assert during["state_until"] == "" and during["state_since"]
    assert 59 <= during["state_age"] <= 61
    keeping.end_serving(_reg(), judge=True)
    after = keeping.record_fields(time.time())
    assert after["state_until"] and after["state_since"] == during["state_since"]
    assert keeping.record_fields(time.time() + SERVED_SHOWN + 1) == {}


def test_no_state_file_served_when_etcd_answered_at_start() -> None:
    keeping = StateKeeping(cfg(), 0.5)
    saved = _saved()
    assert not keeping.serve(saved, FollowStep("applied", registry=_reg()),
                             etcd_registry=_reg(), layout=LayoutRecord("ns-1", "dialog"),
                             layout_ok=True)
    assert keeping.record_fields(time.time()) == {}
