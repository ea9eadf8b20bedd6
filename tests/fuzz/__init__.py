"""Property-based tests (hypothesis) of issue 15, item 4. Four fuzzers:

    test_schedule_dicts.py     (a) random schedule dicts load, or fail naming a key
    test_world_schedules.py    (b) random valid schedules on two kernels equal torch on CPU worlds 1-4
    test_plans.py              (c) a symbolic executor of every lowered plan: each chunk once, no cycle
    test_kernel_mutations.py   (d) mutated kernels transform and import, or fail in one located line;
                                   a sample of them equals torch on a world

`make test` runs them in the CI profile: derandomized, no example database, a bounded number of
examples each. The long profile draws many more, at random:

    SYNCOPY_FUZZ=long python -m pytest tests/fuzz          (or: --hypothesis-profile long)

See profiles.py for the budgets; world.py for the one spawned world that (b) and (d) share.
"""
