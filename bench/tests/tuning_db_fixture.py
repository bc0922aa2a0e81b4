"""Shared by the bench tests that build tuning databases (plain python3, no third-party packages): the schema that
cache/tuning_db.cpp creates (its initial migration script, read from the source) and a failure-collecting check."""
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def schema():
    src = open(os.path.join(REPO, "cache", "tuning_db.cpp")).read()
    m = re.search(r'\{R"sql\((.*?)\)sql"', src, re.S)
    assert m, "cache/tuning_db.cpp: the initial schema script was not found"
    return m.group(1)
