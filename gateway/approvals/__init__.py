"""Commands held for the owner's approval: the records, the question in the chat, the answers.

``records`` (the ``tool_approvals`` table), ``prompt`` (what the chat is shown), ``service`` (asking and
waiting, answering, the audit), ``answers`` (``/approve`` and ``/deny``).
"""
