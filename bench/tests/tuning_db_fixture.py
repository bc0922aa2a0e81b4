"""Shared by the bench tests that build tuning databases (plain python3, no third-party packages): the schema that
cache/tuning_db.cpp creates (its migration scripts, read from the source) and a failure-collecting check."""
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def schema():
    """Every SQL script of cache/tuning_db.cpp's migrations in order (the data rewrites, C++ functions, have nothing to
    do on an empty database): the schema and winners view a database of this kerntune has."""
    src = open(os.path.join(REPO, "cache", "tuning_db.cpp")).read()
    scripts = re.findall(r'\{R"sql\((.*?)\)sql"', src, re.S)
    assert scripts, "cache/tuning_db.cpp: the migration scripts were not found"
    return "\n".join(scripts)
