"""Text from outside (web pages, files, MCP results, memory, project files): scanned for prompt injection
(:mod:`agent.untrusted.scan`) and handed to the model in an envelope that says what it is
(:mod:`agent.untrusted.envelope`)."""
