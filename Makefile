# gpush: build, test, demo. `make help` lists the targets.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
HELPERS  := remote/helperbin/bin
HELPER_MAX_BYTES := 4194304
FUZZTIME ?= 10s
TESTFLAGS ?= -race -timeout 20m
# Helper builds are static and stripped: they run on hosts we know nothing about.
HELPER_BUILD = CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags '-s -w -X github.com/gpush/gpush/helper.Version=$(VERSION)'

.PHONY: help deps build helpers gpush test test-scale lint fuzz demo demo-restarters bench clean

help:
	@echo "make deps    install what the tests and the lab need (Debian, as root)"
	@echo "make build   gpush-helper for linux/amd64+arm64, then bin/gpush embedding them"
	@echo "make test    go vet + go test -race ./...;  make test-scale: the 300-host output test"
	@echo "make demo    start a simulated GPU lab behind sshd and run free_gpus.lua on it"
	@echo "make demo-restarters  the same on workers that restarters bring back (slow, backoff, kubelet stand-in, shell loop)"
	@echo "make lint    gofmt + go vet + staticcheck;  make fuzz: every fuzz target for FUZZTIME"
	@echo "make bench   gpush vs pdsh on 50 lab hosts"

# deps installs the OS packages (openssh-server for the loopback sshd of the
# tests and the lab, pdsh for the benchmark, systemd and util-linux for the
# tests that boot the real systemd in a private namespace: lab/nssystemd;
# mount is split from util-linux on Debian 12; clustershell's nodeset is
# what inventory's node-set tests compare against, ansible-core's
# ansible-inventory what its inventory tests compare against, and ansible's
# collections the public inventories they compare on; gcc and libc6-dev
# build the lab's C gpu-holder, statically; slurmd, slurmctld, slurm-client
# and munge run the real Slurm cluster of the Slurm manager's tests:
# lab/slurmlab; podman, runc and busybox-static the real containers of the
# container manager's tests: lab/podmanlab).
# Only when missing, so it is cheap.
DEB_PACKAGES := openssh-server openssh-client sudo pdsh psmisc systemd util-linux mount clustershell python3 ansible-core ansible gcc libc6-dev slurmd slurmctld slurm-client munge podman runc busybox-static
deps:
	@if ! command -v sshd >/dev/null && [ ! -x /usr/sbin/sshd ] || ! command -v pdsh >/dev/null || ! command -v sudo >/dev/null \
		|| [ ! -x /lib/systemd/systemd ] || ! command -v systemctl >/dev/null || ! command -v nsenter >/dev/null || ! command -v mount >/dev/null || ! command -v nodeset >/dev/null || ! command -v fuser >/dev/null || ! command -v python3 >/dev/null \
		|| ! command -v ansible-inventory >/dev/null || [ ! -d /usr/lib/python3/dist-packages/ansible_collections ] \
		|| ! command -v cc >/dev/null || [ -z "$$(cc -print-file-name=libc.a | grep /)" ] \
		|| [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/slurmd ] || [ ! -x /usr/sbin/munged ] || ! command -v scontrol >/dev/null \
		|| ! command -v podman >/dev/null || { ! command -v runc >/dev/null && [ ! -x /usr/sbin/runc ]; } || ! dpkg -s busybox-static >/dev/null 2>&1; then \
		if [ "$$(id -u)" != 0 ]; then echo "make deps: run as root (apt-get install $(DEB_PACKAGES))"; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(DEB_PACKAGES); \
	fi
	$(GO) mod download

helpers:
	@mkdir -p $(HELPERS)
	$(HELPER_BUILD) -o $(HELPERS)/gpush-helper-linux-amd64 ./cmd/gpush-helper
	GOARCH=arm64 $(HELPER_BUILD) -o $(HELPERS)/gpush-helper-linux-arm64 ./cmd/gpush-helper
	@for f in $(HELPERS)/gpush-helper-linux-amd64 $(HELPERS)/gpush-helper-linux-arm64; do \
		s=$$(stat -c %s $$f); echo "$$f: $$s bytes"; \
		if [ $$s -ge $(HELPER_MAX_BYTES) ]; then echo "$$f is over 4 MiB"; exit 1; fi; \
		echo "$$(sha256sum $$f | cut -d' ' -f1) $$s" > $$f.sha256; \
	done

gpush: helpers
	$(GO) build -trimpath -ldflags '-X github.com/gpush/gpush/helper.Version=$(VERSION) -X main.version=$(VERSION)' -o bin/gpush ./cmd/gpush

build: helpers gpush

# staticcheck comes through the Go module proxy, at a pinned version (go
# run builds it once, then it is cached): nothing to install beforehand.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags scale ./e2e/
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags scale ./e2e/

# The Slurm and podman tests fail, not skip, where Slurm or podman is
# missing (make deps installs them); REQUIRE_REAL= lets them skip.
REQUIRE_REAL ?= 1
test: lint
	GPUSH_REQUIRE_SLURM=$(REQUIRE_REAL) GPUSH_REQUIRE_PODMAN=$(REQUIRE_REAL) $(GO) test $(TESTFLAGS) ./...

# test-scale runs the heavy suites (build tag scale: 300 lab hosts behind one
# sshd) alone, after the others: on 2 cores they would starve the tests that
# run beside them.
test-scale:
	$(GO) test $(TESTFLAGS) -tags scale -run 'Scale' ./e2e/

# fuzz runs each Fuzz target of the module for FUZZTIME.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

demo: build
	$(GO) run ./lab/cmd/gpush-lab demo --gpush bin/gpush

# demo-restarters: four lab hosts whose GPU 0 worker comes back when
# killed, each by another restarter (lab.ScenarioRestarters): a free that
# fails naming them (what restarts the worker, how to stop it) is the
# intended outcome.
demo-restarters: build
	$(GO) run ./lab/cmd/gpush-lab demo --gpush bin/gpush --scenario restarters

bench: build
	bash bench/run.sh

clean:
	rm -rf bin $(HELPERS)/gpush-helper-*
