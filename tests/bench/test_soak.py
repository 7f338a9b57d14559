"""The soak benchmark's machinery: its judgement of the samples (pure) and one short run end to
end on real etcd (an embedded cluster's mix recorded for a few seconds, replayed at 60 times
the rate for 3 minutes of production writes), writing a valid report. No figure is asserted
beyond what the run must contain."""

from __future__ import annotations

import json
from pathlib import Path

from bench.soak import judge, main


def _samples(in_use: list[int]) -> dict[str, object]:
    return {"achieved": 1.0, "samples": [
        {"t": float(i), "equivalent_h": i / 10, "db_size": v + 4096, "in_use": v,
         "naive_db_size": 1000 * (i + 1)} for i, v in enumerate(in_use)]}


def test_levelled_when_the_last_quarter_stays_near_the_second() -> None:
    flat = judge(_samples([100, 200, 300, 300, 310, 300, 290, 305, 300, 300, 310, 300]))
    assert flat["levelled"] is True
    assert flat["steady_in_use_bytes"] == 300
    assert flat["naive_last_bytes"] == 12000


def test_not_levelled_when_it_keeps_growing() -> None:
    growing = judge(_samples([100 * (i + 1) for i in range(12)]))
    assert growing["levelled"] is False


def test_too_few_samples_judge_nothing() -> None:
    assert judge(_samples([1, 2, 3]))["levelled"] is None


def test_behind_when_the_writers_fell_behind() -> None:
    slow = _samples([100] * 12)
    slow["achieved"] = 0.5
    assert judge(slow)["behind"] is True


def test_a_short_soak_reports_the_mix_and_the_database(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    assert main(["--hours", "0.05", "--accel", "60", "--mix-seconds", "4",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    hosts = report["mix"]["per_host"]
    # every daemon host of the embedded cluster wrote its report while the mix was recorded
    assert set(hosts) == {"members/s1", "members/s2", "members/s3", "members/w1"}
    assert all(h["writes_per_s"] > 0 and h["bytes_per_s"] > 0 for h in hosts.values())
    soak = report["soak"]
    assert soak["writes"] > 0 and soak["samples"]
    assert soak["retention_flag"] == "--auto-compaction-retention=60s"
    assert all(s["db_size"] > 0 for s in soak["samples"])
