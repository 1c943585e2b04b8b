"""The operator console: pages at ``/console`` on the gateway's HTTP server, for the person who runs
(and pays for) the bot (not ``adapters.terminal``, the terminal chat).

- :mod:`gateway.console.serve` decides whether this process serves it and builds it;
- :mod:`gateway.console.server` logs people in and guards every page (cookies, CSRF);
- :mod:`gateway.console.pages` the pages and their buttons;
- :mod:`gateway.console.reports` the figures (SQL aggregates), :mod:`gateway.console.charts` their
  charts (SVG geometry), :mod:`gateway.console.render` the templates (autoescaped);
- :mod:`gateway.console.sources` what it reads of spend limits and cache misses;
- :mod:`gateway.console.links` one-time login links, :mod:`gateway.console.attempts` failed logins.
"""
