# Quick start: `make demo` runs the main job, `make test` runs the test suite.
# Both build a pinned virtualenv in .venv (PyPI only) on first use.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
export RMW_IMPLEMENTATION ?= rmw_fastrtps_cpp

.PHONY: demo test venv lint clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-test.txt setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

demo: venv
	$(PY) -m flashdrive_ros.demo

test: venv
	$(PY) -m pytest -q test

lint: venv
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) out
