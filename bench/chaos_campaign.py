"""Fault campaign: random SIGKILLs of every process kind (both stages' workers, the supervisor, the
four services, the Apache Kafka broker) and broker pauses while input flows, on the two-stage
example job, in heap and changelog modes; the read_committed output is checked against the input
afterwards, and each fault's recovery time is measured (``tidemark.local.chaos``: from the kill, or
the end of a pause, to the completion of the first checkpoint triggered after it).

Prints a line per fault as it goes, then per mode a table of recovery min / median / max per process
kind and the output's verdict (lost, duplicated, wrong). Exits 1 when a mode lost, duplicated or
changed a result, or a fault was not recovered from; the whole report also goes to ``--json``.

    .venv/bin/python bench/chaos_campaign.py --kills 100 --pauses 5            # both modes
    .venv/bin/python bench/chaos_campaign.py --mode changelog --kills 20 --pauses 1 --pause-s 20 30
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import tempfile
from pathlib import Path

from tidemark.local.chaos import MODES, CampaignReport, FaultCampaign, plan_faults, recovery_stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=(*MODES, "both"), default="both")
    parser.add_argument("--kills", type=int, default=100, help="SIGKILLs per mode (default 100)")
    parser.add_argument("--pauses", type=int, default=5, help="broker pauses per mode (default 5)")
    parser.add_argument("--pause-s", type=float, nargs=2, default=(20.0, 60.0), metavar=("MIN", "MAX"),
                        help="a pause's length is drawn from [MIN, MAX] seconds (default 20 60)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes per stage (default 1)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the whole report there")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # leave the context managers: nothing left running
    reports: list[CampaignReport] = []
    for mode in MODES if args.mode == "both" else (args.mode,):
        faults = plan_faults(args.kills, args.pauses, pause_s=tuple(args.pause_s), seed=args.seed)
        with tempfile.TemporaryDirectory(prefix=f"tidemark-chaos-{mode}-") as home, \
                FaultCampaign(Path(home), mode, workers=args.workers, seed=args.seed) as campaign:
            reports.append(campaign.run(faults))
    print()
    for report in reports:
        print(report.table())
        print()
    if args.json:
        args.json.write_text(json.dumps([{
            "mode": r.mode, "records": r.records, "passed": r.passed,
            "verdict": None if r.verdict is None else r.verdict.as_dict(),
            "recovery": [dataclasses.asdict(s) for s in recovery_stats(r.results)],
            "faults": [dataclasses.asdict(f) for f in r.results]} for r in reports], indent=2))
    return 0 if all(r.passed for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
