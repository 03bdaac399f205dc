SHELL := /bin/bash
# FlowScope: `make run` and `make test` each install what is missing, then build.
SWIFT ?= swift
CONFIG ?= config/flowscope.json5

PREFIX ?= /usr/local

.PHONY: run test build release install uninstall setup setup-test bench clean examples

run: setup release
	.build/release/flowscope serve --config $(CONFIG)

# Suites whose type name contains "RealTime" check wall-clock bounds: they run in a second pass,
# alone, so the parallel pass cannot starve them of CPU. The headless-browser suite runs there too:
# it blocks a thread of the 2-core cooperative pool for tens of seconds per test, which starved the
# async tests of the parallel pass (an attach test's 5 s HTTP timeout expired on a loaded run).
# So do the other tests that wait on a real HTTP exchange with a deadline, which the parallel pass's
# CPU-bound tests (fuzzing, property runs, kill -9 children) can hold up: the OTLP export suite
# (its `flush()` blocks a pool thread while URLSession talks to a stub collector; one request
# stalled 30 s) and the test kit's attach tests (the attach stream's 5 s timeout expired once more).
SERIAL = RealTime|DashboardBrowser|OTLPSinkTests\.OTLPSinkTests/|FlowTraceTests/attach
# Every process the suite starts inherits FLOWSCOPE_TEST_RUN; after the tests (passed or not),
# scripts/leftover-processes.sh ends any process still carrying it and fails the run.
# Last, the fuzz targets are built (the package instrumented, in .build/fuzz) and each runs over its
# seed corpus once (RUNS=0): a decoder change that breaks a target, or a build change that breaks
# the instrumented build, fails here instead of waiting for the next fuzzing campaign.
test: setup-test
	$(SWIFT) build --build-tests
	@export FLOWSCOPE_TEST_RUN=$$(cat /proc/sys/kernel/random/uuid); status=0; \
	$(SWIFT) test --skip-build --skip '$(SERIAL)' || status=$$?; \
	[ $$status -ne 0 ] || $(SWIFT) test --skip-build --filter '$(SERIAL)' --no-parallel || status=$$?; \
	[ $$status -ne 0 ] || SWIFT=$(SWIFT) bash scripts/examples.sh || status=$$?; \
	bash scripts/leftover-processes.sh "$$FLOWSCOPE_TEST_RUN" || status=1; \
	exit $$status
	SWIFT=$(SWIFT) RUNS=0 bash fuzz/run.sh

build: setup
	$(SWIFT) build

release: setup
	$(SWIFT) build -c release

# The packages in examples/, built and tested from outside (also the last step of `make test`).
examples: build
	SWIFT=$(SWIFT) bash scripts/examples.sh

# The binary carries the dashboard, the default config and the demo backend: it is the only file installed.
install: release
	install -d "$(DESTDIR)$(PREFIX)/bin"
	install -m 0755 .build/release/flowscope "$(DESTDIR)$(PREFIX)/bin/flowscope"
	@echo "installed $(DESTDIR)$(PREFIX)/bin/flowscope (shell completion: flowscope completion bash|zsh|fish)"

uninstall:
	rm -f "$(DESTDIR)$(PREFIX)/bin/flowscope"

bench: release
	.build/release/flowscope bench

setup:
	@bash scripts/setup.sh

setup-test:
	@bash scripts/setup.sh test

clean:
	rm -rf .build
