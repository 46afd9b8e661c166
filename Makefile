# make run  - install into .venv, start the default cluster, show a send/tail round trip and status
# make test - install into .venv and run the whole test suite (short forms of the long drills)
# make test-long - the long drills, soaks and the 10,000-seed simulation (tests marked slow)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the metrics tests run a real Prometheus: Debian's package, unpacked here when the machine has
# none (no service is installed or started, and no root is needed: apt-get download, dpkg-deb -x)
PROMETHEUS := $(VENV)/prometheus/usr/bin/prometheus

.PHONY: install nftables run test test-long drills bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	# the official RocketMQ 5 Python client, for the interop tests: its package is also named
	# `rocketmq` (as the C++ client's is), so it lives in a folder of its own, on PYTHONPATH
	# only in the child processes that run it (tests/interop/rmq5_client.py)
	$(BIN)/python -m pip install --quiet --upgrade --target $(VENV)/clients/rocketmq5 rocketmq-python-client==5.1.2
	touch $(STAMP)

$(PROMETHEUS): | $(STAMP)
	@if command -v prometheus >/dev/null 2>&1; then \
		mkdir -p $(dir $@) && ln -sf "$$(command -v prometheus)" $@; \
	else \
		mkdir -p $(VENV)/prometheus && cd $(VENV)/prometheus && \
		{ apt-get download prometheus 2>/dev/null || { apt-get update -qq && apt-get download prometheus; }; } && \
		dpkg-deb -x prometheus_*.deb . && rm -f prometheus_*.deb; \
	fi
	@test -x $@ && $@ --version | head -1

# the namespace labs' faults (mqctl/hosts/faults.py) use nftables; a lab needs root anyway, so
# it is installed only as root (elsewhere those tests skip, saying why)
nftables:
	@if ! command -v nft >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get install -y -qq nftables >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq nftables; }; \
	fi

install: $(STAMP) $(PROMETHEUS) nftables

# Start the default cluster (conf.toml), send three messages, read them back, show status.
# The cluster keeps running: `.venv/bin/mqctl stop` stops it.
run: install
	$(BIN)/mqctl start
	$(BIN)/mqctl send Demo "hello from mqctl" --tag demo --key greeting --count 3
	$(BIN)/mqctl tail Demo --group make-run --count 3
	$(BIN)/mqctl status

# Three workers on two cores: most tests wait on real processes (brokers, Spark's JVM, the
# clients' subprocesses), so a third worker fills the cores' idle time (measured: 657 s with two
# workers, 572 s with three, the same tree on this host).
test: install
	$(BIN)/python -m pytest -n 3 --dist worksteal --durations=20

# The tests marked slow: the Spark standalone cluster, the 10,000-seed raft simulation, and the
# full forms of long cluster tests whose short forms make test runs (three leader kills, POP and
# SQL92 failovers, an isolated slow broker); then the chaos drills (marked drill too), one at a
# time since each loads both cores: every mode on loopback, and every fault kind for sync and
# dledger across a lab under load for MQCTL_DRILL_SECONDS (60 s). CI runs them after make test.
test-long: install
	$(BIN)/python -m pytest -n 2 --dist worksteal --durations=20 -m "slow and not drill"
	$(BIN)/python -m pytest --durations=30 -m drill

# The drills across a lab in full: every fault kind, 5 minutes each, for sync, dledger and controller, at
# 2,400 msgs/s offered, every figure printed and each report kept in drill-results/ (about 130 minutes).
drills: install
	mkdir -p drill-results
	MQCTL_DRILL_SECONDS=300 MQCTL_DRILL_RESULTS=$(CURDIR)/drill-results $(BIN)/python -m pytest -s --durations=30 -m drill tests/mqctl/test_chaos_lab.py

bench: install
	$(BIN)/mqctl bench store

clean:
	-$(BIN)/mqctl stop --force
	rm -rf $(VENV) data drill-results .pytest_cache
