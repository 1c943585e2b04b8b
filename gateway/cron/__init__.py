"""Scheduled tasks: jobs stored in ``state.db``, run by APScheduler inside ``herald gateway run``.

- ``schedule``: the schedule syntax (pure): cron fields, ``every 2h``, ``in 30m``, an ISO time.
- ``jobs``: the ``cron_jobs`` table, the one source of truth (the CLI writes it from another process).
- ``manage``: creating and changing jobs, with who-may-do-what, shared by the tool, ``/cron`` and the CLI.
- ``describe``: how a job reads in a chat, a tool result and ``herald cron list``.
- ``runner``: one run: an agent turn in the job's own session, the answer queued in the outbox.
- ``scheduler``: APScheduler kept in step with the table (misfires, coalescing, one run at a time).
- ``tool``: the agent's ``cron`` tool; ``chat``: the ``/cron`` command.
"""
