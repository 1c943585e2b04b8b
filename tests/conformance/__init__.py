"""The conformance suite: the same scenarios on every platform, each through its own fake.

``test_scenarios.py`` says what every adapter must do with the gateway around it (a DM is answered, a
group message only when addressed, a redelivery once, ...), in the platform's words only through a
:class:`~tests.conformance.driver.Driver`: how to send a DM, a group message, a mention, a file, a
command on the platform's fake, and how to read what the bot sent. Each platform has one driver
(``telegram_driver.py``, ``discord_driver.py``), listed in ``drivers.py``; every scenario runs once per
driver (and, like every test that keeps state, on SQLite and on PostgreSQL). The gateway under test is
built exactly as ``herald gateway run`` builds it: from the platform's spec (``adapters.registry``),
its config section and its token in the environment.
"""
