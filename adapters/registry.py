"""Every platform Herald can talk on: the one list the gateway reads.

Adding a platform is adding its spec here (``adapters/<name>/spec.py``, see ``adapters.spec`` and the
docs/adding-a-platform.md); nothing else in the gateway or the agent names a platform. This is the
only module outside a platform's own folder that imports it (``tests/house/test_layering.py``), and it imports
only the specs: no SDK is loaded until a platform's ``build`` runs.
"""

from __future__ import annotations

from typing import Any

from adapters.discord.spec import SPEC as DISCORD
from adapters.email.spec import SPEC as EMAIL
from adapters.matrix.spec import SPEC as MATRIX
from adapters.signal.spec import SPEC as SIGNAL
from adapters.slack.spec import SPEC as SLACK
from adapters.spec import PlatformSpec
from adapters.telegram.spec import SPEC as TELEGRAM
from adapters.whatsapp.spec import SPEC as WHATSAPP

PLATFORMS: tuple[PlatformSpec[Any], ...] = (TELEGRAM, DISCORD, SLACK, MATRIX, WHATSAPP, SIGNAL, EMAIL)
"""In the order config.yaml shows their sections and ``herald doctor`` checks them."""


def find(name: str) -> PlatformSpec[Any] | None:
    """The platform called ``name`` (an ``InboundMessage.platform``), if it is registered."""
    return next((spec for spec in PLATFORMS if spec.name == name), None)


def platform_variables() -> frozenset[str]:
    """Every variable a registered platform reads (its token and its other secrets): what a bot's
    ``tokens`` may name, and what a bot never takes from the environment or ``.env`` otherwise."""
    return frozenset(secret.env for spec in PLATFORMS for secret in (spec.token, *spec.secrets))


EXAMPLE = PLATFORMS[0].name
"""The platform that help texts and error messages use in their examples (``platform:12345``)."""
