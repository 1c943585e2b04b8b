"""A fake Slack on 127.0.0.1: the Web API, a Socket Mode websocket and signed Events API posts, driven
through the real slack_sdk (``AsyncWebClient(base_url=fake.api_url)``; ``apps.connections.open`` hands
out the fake's websocket URL)."""

from .server import FakeSlack, SlackMessage

__all__ = ["FakeSlack", "SlackMessage"]
