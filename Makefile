SHELL := /bin/bash
# FlowScope: `make run` and `make test` each install what is missing, then build.
SWIFT ?= swift
CONFIG ?= config/flowscope.json5

PREFIX ?= /usr/local

.PHONY: run test build release install uninstall setup setup-test bench clean examples

run: setup release
	.build/release/flowscope serve --config $(CONFIG)

# The suite is one plain `swift test`, as Xcode and any Swift developer run it: a suite that blocks
# a thread (sockets, a headless browser, child processes, sleeps) carries `.ownThread` and runs on a
# thread of its own, never on the cooperative pool the async tests need; one that checks wall-clock
# bounds carries `.realTime` and runs while no other blocking test does (Tests/Support/OwnThread.swift).
# Every process the suite starts inherits FLOWSCOPE_TEST_RUN; after the tests (passed or not),
# scripts/leftover-processes.sh ends any process still carrying it and fails the run.
# Last, the fuzz targets are built (the package instrumented, in .build/fuzz) and each runs over its
# seed corpus once (RUNS=0): a decoder change that breaks a target, or a build change that breaks
# the instrumented build, fails here instead of waiting for the next fuzzing campaign.
test: setup-test
	$(SWIFT) build --build-tests
	@export FLOWSCOPE_TEST_RUN=$$(cat /proc/sys/kernel/random/uuid); status=0; \
	$(SWIFT) test --skip-build || status=$$?; \
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
