"""tests/long holds scripts for long runs, not tests: pytest collects nothing here."""

collect_ignore_glob = ["*.py"]
