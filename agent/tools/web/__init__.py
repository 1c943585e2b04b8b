"""The web tool set: ``web_fetch`` (a page, feed or text file, with the SSRF rule) and ``web_search``.

``addresses`` decides which addresses may be reached, ``guard`` enforces it on every connection,
``fetch`` follows redirects under a size cap and a deadline, ``extract`` turns a body into text,
``search`` holds the search providers, ``tools`` the tool definitions and their connections.
"""

from agent.tools.web.tools import WebTools

__all__ = ["WebTools"]
