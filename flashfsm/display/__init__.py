"""What the front ends show, in one place: the display layer under the CLI, the web view and
the metrics, so a page, a command and a scrape never tell two stories.

- `text`: the console everything is printed through, outside text escaped, lines wrapped;
- `logs`: a log's timeline, verdict, live view, run and sweeper, as lines and as JSON;
- `listing`: a stream in one row, as `flashfsm ls` and the runs list have it;
- `ledger`: a bill in lines and as JSON;
- `sources`: a SOURCE, the job log it stands for, and its bill priced as `cost` prices it;
- `workers`: the worker that took a job and its last log lines;
- `explain`: why a verdict fired, as `flashfsm explain` prints it and a stream's page shows it.

It stands on the folds and views below it (`flashfsm.views`, `flashfsm.render`,
`flashfsm.postmortem`) and imports nothing of the front ends above it
(`tests/test_layers.py`).
"""
