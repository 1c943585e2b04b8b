"""Pure text functions for rendering an answer on a platform: counting, splitting, formatting spans.

No I/O, no platform SDK, nothing of the gateway: a platform's renderer (``Capabilities.render``) is
built from these, and the gateway uses them too. ``units`` counts UTF-16 code units; ``boundaries``
plans where a long text splits; ``fences`` keeps code blocks balanced across parts; ``split`` splits
Markdown; ``entities`` splits text plus formatting entities; ``controls`` masks control characters;
``markdown`` is the renderer of platforms that show Markdown themselves, ``terminal`` the terminal's;
``styled`` converts Markdown to text plus entities (Telegram, Signal), ``star_marks`` to the star
markups (Slack, WhatsApp); ``literal`` makes the renderers built on a Markdown parser show raw HTML
and character references as written; ``layout_guard`` spots Markdown whose layout would explode.
"""
