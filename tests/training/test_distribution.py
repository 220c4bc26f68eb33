"""Choosing the strategy: devices named by --devices, workers named by TF_CONFIG."""
import json

import pytest

from t2t_lite.training import distribution


def test_an_unknown_device_is_named_with_the_devices_that_exist(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(distribution.DistributionError, match=r"GPU:7.*CPU:0"):
        distribution.choose_strategy(["GPU:7"])


def test_one_device_gives_a_single_replica_that_writes(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    strategy = distribution.choose_strategy(["CPU:0"])
    assert strategy.num_replicas_in_sync == 1
    assert distribution.is_chief(strategy)


def test_tf_config_workers_are_counted(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
         "task": {"type": "worker", "index": 0}}))
    assert distribution.cluster_workers() == 3
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(distribution.DistributionError, match="TF_CONFIG"):
        distribution.cluster_workers()
