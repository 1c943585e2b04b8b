"""The browser tool set: a real Chromium for pages that need scripts, a login or a form.

``proxy`` applies web_fetch's address rule to every connection the browser opens, ``host`` starts
Chromium and keeps one context per session, ``snapshot`` turns a page into the text the model reads,
``downloads`` saves what a page downloads into the owner's workspace, ``tools`` holds the tool
definitions. Playwright is imported only when the browser starts.
"""

from agent.tools.browser.downloads import DownloadPlace
from agent.tools.browser.tools import BrowserTools

__all__ = ["BrowserTools", "DownloadPlace"]
