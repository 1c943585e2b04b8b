"""Every platform's conformance driver, by the platform's name: a platform in ``adapters.registry``
without one here fails ``test_every_registered_platform_has_a_driver``."""

from __future__ import annotations

from collections.abc import Callable

from tests.conformance.discord_driver import DiscordDriver
from tests.conformance.driver import Driver
from tests.conformance.email_driver import EmailDriver
from tests.conformance.matrix_driver import MatrixDriver
from tests.conformance.signal_driver import SignalDriver
from tests.conformance.slack_driver import SlackDriver
from tests.conformance.telegram_driver import TelegramDriver
from tests.conformance.whatsapp_driver import WhatsAppDriver

DRIVERS: dict[str, Callable[[], Driver]] = {
    "telegram": TelegramDriver,
    "discord": DiscordDriver,
    "slack": SlackDriver,
    "matrix": MatrixDriver,
    "whatsapp": WhatsAppDriver,
    "signal": SignalDriver,
    "email": EmailDriver,
}
