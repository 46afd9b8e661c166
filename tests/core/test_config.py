from pathlib import Path

import pytest

from core.config import Config, load_config, parse_config
from core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_conf_toml_loads():
    config = load_config(REPO / "conf.toml")
    assert isinstance(config, Config)
    assert config.replication.mode == "async"
    assert config.data_dir == REPO / "data"
    assert config.namesrv_addresses == ["127.0.0.1:9876"]
    assert [b.node for b in config.brokers] == ["broker-a-0", "broker-a-1"]  # a master and its slave


@pytest.mark.parametrize("raw, message", [
    ({"store": {"segment_size_byte": 1}}, "unknown key"),
    ({"stores": {}}, "unknown section"),
    ({"store": {"flush": "sometimes"}}, "store.flush"),
    ({"replication": {"mode": "paxos"}}, "replication.mode"),
    ({"store": {"disk_max_used_ratio": 2}}, "disk_max_used_ratio"),
    ({"store": {"flush_interval_ms": 0}}, "flush_interval_ms"),
    ({"store": {"segment_size_bytes": True}}, "must be a number"),
    ({"brokers": [{"name": "b", "advertise": "nohost"}]}, "advertise must be host:port"),
    ({"brokers": [{"name": "b", "advertise": "127.0.0.1:0"}]}, "advertise needs a real port"),
])
def test_bad_config_is_a_clear_error(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[store\n")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_config(bad)


def test_metrics_listen_defaults_to_a_free_port_on_the_node_s_host_and_is_checked():
    raw = {"nameservers": [{"name": "ns1", "listen": "127.0.0.5:9876"}],
           "brokers": [{"name": "b", "listen": "127.0.0.6:10911", "metrics_listen": "127.0.0.6:5557"}]}
    config = parse_config(raw)
    assert config.metrics.enabled and config.metrics.label_values_max == 500
    assert config.metrics_listen_of("ns1") == "127.0.0.5:0"
    wild = parse_config({"brokers": [{"name": "w", "listen": "0.0.0.0:10911"}]})
    assert wild.metrics_listen_of("w-0") == "127.0.0.1:0"  # not exposed unless asked for
    assert config.metrics_listen_of("b-0") == "127.0.0.6:5557"
    assert "127.0.0.6:5557" in config.listens_of("b-0")  # mqctl start checks it is free
    with pytest.raises(ConfigError, match="metrics_listen must be host:port"):
        parse_config({"brokers": [{"name": "b", "metrics_listen": "nowhere"}]})
    with pytest.raises(ConfigError, match="used twice"):
        parse_config({"nameservers": [{"name": "ns1", "listen": "127.0.0.1:9876"}],
                      "brokers": [{"name": "b", "metrics_listen": "127.0.0.1:9876"}]})
    with pytest.raises(ConfigError, match="label_values_max"):
        parse_config({"metrics": {"label_values_max": 0}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) in \[metrics\]"):
        parse_config({"metrics": {"port": 1}})
