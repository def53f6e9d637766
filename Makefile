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

# test_ros_node.py runs in its own process: its DDS graph timing is disturbed by modules run
# before it in the same interpreter.
test: venv
	$(PY) -m pytest -q test --ignore=test/test_ros_node.py
	$(PY) -m pytest -q test/test_ros_node.py

lint: venv
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) out
