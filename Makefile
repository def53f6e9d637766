# Quick start: `make demo` runs the main job, `make test` runs the test suite.
# Both build a pinned virtualenv in .venv (PyPI only) on first use.
# Python 3.11 where present, else the system python3 (the pins are tested with 3.11 and 3.12)
PYTHON ?= $(shell command -v python3.11 2>/dev/null || echo python3)
VENV ?= .venv
VENV_PYTHON := $(VENV)/bin/python
# on the venv's wheels alone, a sourced ROS install left out (scripts/venv_run)
PY := scripts/venv_run $(VENV_PYTHON)
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST
# test processes (pytest-xdist); each test module runs whole in one of them
TEST_WORKERS ?= 2

# Tests comparing two float32 paths; `make test` runs them once more under other MKL and
# ATen kernels, as another CPU would pick.
NUMERIC_TESTS := test/test_engine_engine.py test/test_engine_coc_reuse.py \
	test/test_engine_encoded_frames.py test/test_engine_act_apart.py \
	test/test_engine_flow_cached.py test/test_engine_forced_coc.py test/test_eval_ablation.py \
	test/test_eval_through_ros.py::test_node_plans_equal_offline_plans_on_the_same_windows

.PHONY: demo test test-numerics venv lint clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-test.txt setup.py
	test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

demo: venv
	$(PY) -m flashdrive_ros.demo

test: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=25 test
	$(MAKE) --no-print-directory test-numerics

test-numerics: venv
	MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2 $(PY) -m pytest -q -p no:cacheprovider $(NUMERIC_TESTS)

lint: venv
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) out
