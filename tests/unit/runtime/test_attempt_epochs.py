"""An empty restart takes an epoch newer than every attempt that failed, even one the coordinator has
not heard of yet (runtime.supervisor.attempt_planner): a worker that died while starting ends its
attempt before that attempt registers, and the processes released in place would take an attempt
of an epoch they already released for released at once."""

from __future__ import annotations

from tidemark.admin.client import CoordinatorClient
from tidemark.config.settings import TidemarkSettings
from tidemark.examples.access_log import url_counts
from tidemark.runtime.supervisor.attempt_planner import AttemptPlanner, AttemptState, RunOptions
from tidemark.storage import open_storage
from tidemark.types import Epoch


def test_an_empty_restart_is_newer_than_the_failed_epoch_the_coordinator_has_not_seen(tmp_path, monkeypatch):
    planner = AttemptPlanner(TidemarkSettings(), RunOptions("tidemark.examples.access_log:url_counts"),
                             CoordinatorClient("http://127.0.0.1:9", "token"), url_counts(job_id="j"),
                             open_storage(tmp_path.as_uri()))
    seen = {"epoch": 1}  # the coordinator has epoch 1 only: epoch 2 failed before it registered
    monkeypatch.setattr(planner, "coordinator_epoch", lambda: seen["epoch"])
    monkeypatch.setattr(planner, "_await_ended", lambda failed: None)
    planner.origin = AttemptState(0, Epoch(1), None, None)  # a run that began empty, no checkpoint since
    assert planner.failover(1, Epoch(1)).epoch == 2
    assert planner.failover(2, Epoch(2)).epoch == 3, "epoch 2 again: its released processes would not run it"
    seen["epoch"] = 7  # the coordinator ahead (another run's epochs): its newest + 1
    assert planner.failover(3, Epoch(3)).epoch == 8
