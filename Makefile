# The two commands of the README:
#   make demo   installs everything and runs one audit cycle on auditor.toml
#   make test   installs everything and runs the whole test suite
.PHONY: setup demo test test-long lint docs bench fuzz soak clean

setup:
	scripts/setup

# Exit status 1 means "the audit found something" (the default config includes a pair that
# is incompatible on purpose), which is the demo working, not make failing. The demo keeps its
# own history (.demo/history.db), never the user's default one.
demo: setup
	@mkdir -p .demo; .venv/bin/auditor --config auditor.toml --db .demo/history.db audit; rc=$$?; \
	  echo "(the run is stored in .demo/history.db: .venv/bin/auditor --db .demo/history.db runs lists it)"; \
	  if [ $$rc -eq 1 ]; then echo "(exit status 1: the audit found drift or an incompatibility, shown above)"; \
	  elif [ $$rc -ne 0 ]; then exit $$rc; fi

# The suite runs on TEST_WORKERS processes (pytest-xdist, --dist loadfile: a file's tests stay
# on one worker, so its module fixtures, often a whole cycle, run once). TEST_WORKERS=0 runs it
# in this process. make test stays within 15 minutes; what takes minutes of its own is
# test-long's, which CI (.ci/run) runs after it: the fault suite at its CI size (tests/faults/),
# the docs' journeys run as written (tests/fleet/test_readme_stacks.py), three auditors sharing
# ten cycles (tests/fleet/test_queue_stacks.py), the daemon's lifecycle over many cycles
# (tests/stacks/test_daemon_stacks.py), real Prometheus and Alertmanager servers against a
# daemon (tests/stacks/test_monitoring_stacks.py), the same cycles over ssh and here
# (tests/fleet/test_parity_stacks.py), the installed unit's cycle as its user
# (tests/stacks/test_service_stacks.py) and each bench's quick run (marker `benches`).
TEST_WORKERS ?= 2
LONG = tests/faults tests/fleet/test_readme_stacks.py tests/fleet/test_queue_stacks.py \
  tests/stacks/test_daemon_stacks.py tests/stacks/test_monitoring_stacks.py \
  tests/fleet/test_parity_stacks.py tests/stacks/test_service_stacks.py \
  tests/stacks/test_fix_stacks.py tests/stacks/test_fix_model_stacks.py tests/stacks/test_fix_converter_stacks.py
test: setup
	.venv/bin/ruff check .
	AUDITOR_REQUIRE_STACKS=1 AUDITOR_REQUIRE_POSTGRES=1 .venv/bin/python -m pytest --durations=25 -rs \
	  -n $(TEST_WORKERS) --dist loadfile -m "not benches" $(addprefix --ignore=,$(LONG))

test-long: setup
	AUDITOR_REQUIRE_STACKS=1 AUDITOR_REQUIRE_POSTGRES=1 .venv/bin/python -m pytest --durations=10 -rs \
	  -n $(TEST_WORKERS) --dist loadfile $(LONG) tests/stacks/test_bench_stacks.py

lint: setup
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

# The documentation site (docs/, mkdocs.yml) in site/; --strict: a broken link is an error.
docs: setup
	.venv/bin/mkdocs build --strict

bench: setup
	.venv/bin/python bench/latency_overhead.py
	.venv/bin/python bench/full_cycle.py
	.venv/bin/python bench/history_queries.py
	.venv/bin/python bench/daemon_memory.py
	.venv/bin/python bench/remote_hosts.py
	.venv/bin/python bench/check_vs_cycle.py
	.venv/bin/python bench/gate_matrix.py

# Property tests at soak size: 1000 random examples per surface (config loader, CLI arguments).
fuzz: setup
	AUDITOR_FUZZ_EXAMPLES=$${AUDITOR_FUZZ_EXAMPLES:-1000} AUDITOR_FUZZ_RANDOM=1 \
	  .venv/bin/python -m pytest -q tests/faults/test_fuzz_config.py tests/faults/test_fuzz_cli.py

# The fault suite for an hour and more (kill -9 trials, fuzzing, daemon soak), with figures.
soak: setup
	.venv/bin/python bench/soak.py --soak

clean:
	rm -rf .venv .demo site build *.egg-info .pytest_cache .ruff_cache
