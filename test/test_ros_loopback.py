"""Loopback DDS domains: every test its own, overridable by the environment, checked."""

import os

import pytest

from flashdrive_ros.ros.harness.loopback import (
    DOMAIN_ID_COUNT,
    DOMAIN_ID_ENV,
    DOMAIN_ID_FIRST,
    loopback_domain_id,
)

SEEN = []


@pytest.mark.parametrize("run", [0, 1])
def test_each_test_has_a_domain_of_its_own(run, test_domain, module_domain):
    assert loopback_domain_id() == test_domain != module_domain
    assert DOMAIN_ID_FIRST <= test_domain < DOMAIN_ID_FIRST + DOMAIN_ID_COUNT
    SEEN.append(test_domain)
    assert len(set(SEEN)) == len(SEEN) == run + 1


def test_without_the_variable_the_domain_comes_from_the_pid(monkeypatch):
    monkeypatch.delenv(DOMAIN_ID_ENV)
    assert loopback_domain_id() == DOMAIN_ID_FIRST + os.getpid() % DOMAIN_ID_COUNT


@pytest.mark.parametrize("value", ["7", "220", "x", "-3"])
def test_a_domain_outside_the_loopback_range_is_refused(value, monkeypatch):
    monkeypatch.setenv(DOMAIN_ID_ENV, value)
    with pytest.raises(ValueError, match=DOMAIN_ID_ENV):
        loopback_domain_id()
