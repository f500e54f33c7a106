# Looopy-Go. `make help` lists the targets.
GO        ?= go
# staticcheck, pinned; `make tools` installs it into $(GOBIN) (default: $(go env GOPATH)/bin)
STATICCHECK_VERSION := v0.8.2
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo "$$($(GO) env GOPATH)/bin/staticcheck")
PKGS      := ./...
BENCHTIME ?= 1s
COUNT     ?= 6

.PHONY: help build test check tools bench bench-reference run plugins plugins-go plugins-all fixtures-check test-long clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

build: plugins-go ## build the host binary into bin/ (looopy -version prints $(VERSION))
	$(GO) build -ldflags "-X github.com/looopy-go/looopy/host.version=$(VERSION)" -o bin/looopy ./cmd/host

run: build ## run the host: scripted demo model, example plugins, data in ./data
	./bin/looopy

run-remote: build ## the demo with a remote sub-agent: a second host on 127.0.0.1:8081 is the researcher (try: research research owls)
	./bin/looopy -config examples/remote-demo/child.json & child=$$!; trap 'kill $$child' EXIT INT TERM; ./bin/looopy -config examples/remote-demo/parent.json

plugins-go: ## build the Go example plugins (stock Go, GOOS=wasip1)
	@./scripts/build-go-plugins.sh

plugins: plugins-go ## build every example plugin from source (needs the toolchains .ci/run installs)
	@./scripts/build-plugins.sh

fixtures-check: plugins ## rebuild the non-Go plugins and fail if they differ from the committed fixtures
	@git diff --exit-code -- examples/plugins ':(glob)examples/plugins/**/*.wasm' || (echo "committed .wasm fixtures differ from a fresh build" >&2; exit 1)

# The packages whose tests take longest, given first: go test starts
# packages in the order it is given them, so these long poles start as soon
# as they are built and the short packages fill in around them.
TEST_FIRST := ./host ./plugins ./host/cli

# go test's own guard is 10 minutes a package; the host package alone takes
# about 5 on a quiet 2-core machine and went past 10 with other work beside
# it. Tests must pass on a loaded machine, so the guard is a package's
# whole run at a few times its quiet length; each test's own guards still
# fail fast.
TEST_TIMEOUT ?= 30m

test: plugins-go ## run every test with the race detector
	@out=$$(mktemp); \
	  ( for mod in examples/plugins/*/go.mod; do (cd "$$(dirname "$$mod")" && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...) || exit 1; done ) >"$$out" 2>&1 & ex=$$!; \
	  pkgs="$(TEST_FIRST) $$($(GO) list $(PKGS) | grep -v -x -e "$$($(GO) list -m)/host" -e "$$($(GO) list -m)/plugins" -e "$$($(GO) list -m)/host/cli")"; \
	  echo "$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$pkgs"; $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$pkgs; st=$$?; \
	  wait $$ex; exst=$$?; echo "== the example plugins' own modules (run beside the above):"; cat "$$out"; rm -f "$$out"; \
	  test $$st = 0 && test $$exst = 0

test-long: plugins-go ## the long tests (large artifacts, crash rounds)
	$(GO) test -count=1 -run 'Long' -tags long -timeout 60m $(PKGS)

tools: ## install the pinned staticcheck (2026.2.2) that make check runs
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

check: ## vet, staticcheck, formatting, go mod tidy, import directions
	$(GO) vet $(PKGS)
	@test -x "$(STATICCHECK)" || (echo "staticcheck not found: run make tools" >&2; exit 1)
	@"$(STATICCHECK)" -version | grep -q "($(STATICCHECK_VERSION:v%=%))" || (echo "staticcheck $(STATICCHECK_VERSION) wanted, found $$("$(STATICCHECK)" -version): run make tools" >&2; exit 1)
	"$(STATICCHECK)" $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1)
	@cp go.mod /tmp/looopy.go.mod.bak; cp go.sum /tmp/looopy.go.sum.bak; $(GO) mod tidy; \
	  if ! git diff --quiet -- go.mod go.sum; then cp /tmp/looopy.go.mod.bak go.mod; cp /tmp/looopy.go.sum.bak go.sum; echo "go mod tidy changes go.mod/go.sum" >&2; exit 1; fi
	@./scripts/check-imports.sh

bench: plugins-go ## run the benchmarks (-benchmem); compare runs with benchstat
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(COUNT) $(PKGS)

bench-reference: ## the host next to the reference A2A server (a2asrv) in the same runs, and each ratio against its goal
	./scripts/bench-reference.sh

clean:
	rm -rf bin
