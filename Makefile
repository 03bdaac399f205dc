SHELL := /bin/bash
# FlowScope: `make run` and `make test` each install what is missing, then build.
SWIFT ?= swift
CONFIG ?= config/flowscope.json5

.PHONY: run test build release setup setup-test bench clean

run: setup release
	.build/release/flowscope serve --config $(CONFIG)

test: setup-test
	$(SWIFT) build --build-tests
	$(SWIFT) test --skip-build 2>&1 | tee .build/test.log; exit $${PIPESTATUS[0]}

build: setup
	$(SWIFT) build

release: setup
	$(SWIFT) build -c release

bench: release
	.build/release/flowscope bench

setup:
	@bash scripts/setup.sh

setup-test:
	@bash scripts/setup.sh test

clean:
	rm -rf .build
