"""Child-process entry point for the kill -9 test: the real DR daemon, one job brought forward.

``python tests/dr/child_daemon.py SITE_FILE JOB_ID`` runs :class:`DrDaemon` as
``gotthard dr daemon`` does (Lease, start-up chores, scheduler on the SQLite job store),
and once it leads, sets the next run time of *JOB_ID* to now, so the scheduler fires
that job at once instead of at its cron time. It then keeps running until it is killed.
"""

from __future__ import annotations

import datetime as dt
import sys
import time

from gotthard import config
from gotthard.daemon import configure_logging
from gotthard.dr.daemon import DrDaemon


def main(site_file: str, job_id: str) -> None:
    configure_logging("info")
    daemon = DrDaemon(config.load(site_file))
    elector = daemon.elector()
    while not daemon.step(elector):
        time.sleep(0.1)
    assert daemon.scheduler is not None
    daemon.scheduler.modify_job(job_id, next_run_time=dt.datetime.now(dt.UTC))
    print(f"fired {job_id}", flush=True)
    daemon.run()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
