"""``mqctl config get | set`` on a copy of the repo's conf.toml: edits keep every comment, and a
refused edit leaves the file byte-identical. No cluster is started."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO_CONF = Path(__file__).resolve().parents[2] / "conf.toml"


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    path = tmp_path / "conf.toml"
    path.write_bytes(REPO_CONF.read_bytes())
    return path


@pytest.fixture
def mqctl(conf, subprocess_env):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mqctl", "--config", str(conf), *args],
                              check=False, capture_output=True, text=True, env=subprocess_env, timeout=60)
    return run


def comment_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("#")]


def test_set_keeps_every_comment_and_get_reads_it_back(conf, mqctl):
    original = conf.read_text()
    assert tomllib.loads(original)["replication"]["mode"] == "async"

    done = mqctl("config", "set", "replication.mode", "sync")

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "replication.mode: async -> sync (restart the nodes to apply: mqctl restart)"
    edited = conf.read_text()
    assert comment_lines(edited) == comment_lines(original)
    assert len(comment_lines(original)) > 5
    assert tomllib.loads(edited)["replication"]["mode"] == "sync"
    # only the edited line differs
    changed = [(a, b) for a, b in zip(original.splitlines(), edited.splitlines(), strict=True) if a != b]
    assert changed == [('mode = "async"', 'mode = "sync"')]
    got = mqctl("config", "get", "replication.mode")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "sync"
    got_json = mqctl("config", "get", "replication.mode", "--json")
    assert json.loads(got_json.stdout) == {"key": "replication.mode", "value": "sync", "source": "file"}


@pytest.mark.parametrize(("args", "message"), [
    (("store.nope", "1"), "the keys of [store] are: store.segment_size_bytes, store.flush,"),
    (("nosuch.key", "1"), "the sections are: cluster, store, replication, namesrv, broker"),
    (("brokers.listen", "127.0.0.1:1"), "[[brokers]] is an array of tables"),
    (("store.flush_interval_ms", "abc"), "store.flush_interval_ms takes an integer, not 'abc'"),
    (("store.archive", "maybe"), "store.archive takes true or false"),
    (("store.retention_hours", "soon"), "store.retention_hours takes a number"),
    # converted fine, but parse_config rejects the value
    (("store.flush", "maybe"), "store.flush must be one of ('async', 'sync'), not 'maybe'"),
    (("store.disk_max_used_ratio", "1.5"), "store.disk_max_used_ratio must be in (0, 1]"),
])
def test_bad_edits_are_refused_and_the_file_is_untouched(conf, mqctl, args, message):
    before = conf.read_bytes()
    done = mqctl("config", "set", *args)
    assert done.returncode != 0
    assert done.stderr.startswith("mqctl: ")
    assert message in done.stderr
    assert conf.read_bytes() == before
    assert [p.name for p in conf.parent.iterdir()] == ["conf.toml"]  # no temp file left behind


def test_values_are_converted_to_the_field_type(conf, mqctl):
    for key, value in (("store.flush_interval_ms", "250"), ("store.archive", "yes"),
                       ("broker.long_polling", "0"), ("store.retention_hours", "48"),
                       ("cluster.name", "Blue")):
        done = mqctl("config", "set", key, value)
        assert done.returncode == 0, done.stderr
    raw = tomllib.loads(conf.read_text())
    assert raw["store"]["flush_interval_ms"] == 250
    assert raw["store"]["archive"] is True
    assert raw["broker"]["long_polling"] is False  # absent before: added to [broker]
    assert raw["store"]["retention_hours"] == 48.0 and isinstance(raw["store"]["retention_hours"], float)
    assert raw["cluster"]["name"] == "Blue"


def test_json_output_and_defaults(conf, mqctl):
    done = mqctl("config", "set", "store.flush_interval_ms", "750", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"key": "store.flush_interval_ms", "old": 500, "new": 750, "changed": True}
    # a key the file does not set: get shows the dataclass default
    got = mqctl("config", "get", "store.recover_cut_damage", "--json")
    assert json.loads(got.stdout) == {"key": "store.recover_cut_damage", "value": False, "source": "default"}


def test_a_missing_section_is_created(conf, mqctl):
    conf.write_text('# only a comment and a store\n[store]\nflush = "async"  # keep me\n')
    done = mqctl("config", "set", "replication.mode", "sync")
    assert done.returncode == 0, done.stderr
    text = conf.read_text()
    assert "# only a comment and a store" in text and 'flush = "async"  # keep me' in text
    assert tomllib.loads(text) == {"store": {"flush": "async"}, "replication": {"mode": "sync"}}


def test_secrets_are_never_printed_by_get_or_set(conf, mqctl):
    # found: `config set acl.secret_key X` printed the old and the new secret
    conf.write_text(conf.read_text().replace('# access_key = "admin-key"', 'access_key = "admin-key-1"')
                    .replace('# secret_key = "admin-secret"', 'secret_key = "first-secret-value"'))
    runs = [mqctl("config", "set", "acl.secret_key", "second-secret-value"),
            mqctl("config", "set", "acl.secret_key", "third-secret-value", "--json"),
            mqctl("config", "set", "acl.secret_key", "third-secret-value"),  # unchanged
            mqctl("config", "get", "acl.secret_key"), mqctl("config", "get", "acl.secret_key", "--json"),
            mqctl("config", "set", "acl.secret_key", "sh-42x")]  # refused: the error must not show it either
    for done in runs:
        shown = done.stdout + done.stderr
        assert not any(s in shown for s in ("first-secret", "second-secret", "third-secret", "sh-42x")), shown
    assert tomllib.loads(conf.read_text())["acl"]["secret_key"] == "third-secret-value"  # the file has it
    assert runs[0].stdout.strip() == "acl.secret_key: ******** -> ******** (restart the nodes to apply: mqctl restart)"
    assert json.loads(runs[1].stdout) == {"key": "acl.secret_key", "old": "********", "new": "********",
                                          "changed": True, "secret": True}
    assert runs[3].stdout.strip() == "********"
    assert runs[5].returncode != 0 and "at least 7 characters" in runs[5].stderr
    assert mqctl("config", "get", "acl.access_key").stdout.strip() == "admin-key-1"  # not a secret
