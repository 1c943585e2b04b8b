"""The owner's hands: shell commands and files on the machine Herald runs on, with approval and an audit.

- :mod:`~agent.hands.runner`: where a command runs (the :class:`Runner` seam; :class:`LocalRunner` here,
  a sandbox behind the same seam), with its timeout, capped output and the whole tree stopped;
- :mod:`~agent.hands.processes`: finding and signalling every process a command started;
- :mod:`~agent.hands.sandbox`: the runner ``tools.sandbox`` asks for, or why it cannot be had:
  :mod:`~agent.hands.bubblewrap` and :mod:`~agent.hands.docker_runner`, their limits in
  :mod:`~agent.hands.limits`;
- :mod:`~agent.hands.output`: output kept to its head and tail;
- :mod:`~agent.hands.jobs`: commands left running in the background, per chat;
- :mod:`~agent.hands.shell_words` and :mod:`~agent.hands.rules`: reading a command as bash will, and
  the rules that hold it for the owner's yes;
- :mod:`~agent.tools.approval` (with the tool vocabulary, below the hands): what a held tool asks the
  turn's approver (the gateway answers);
- :mod:`~agent.hands.paths` and :mod:`~agent.hands.files`: the folders the file tools may use, and
  what they do there;
- :mod:`~agent.hands.terminal`, :mod:`~agent.hands.code` and :mod:`~agent.hands.file_tools`: the tools
  themselves.

:class:`~agent.hands.toolbox.Hands` puts them together from ``tools.*`` (``agent.settings.ToolsSettings``).
"""
