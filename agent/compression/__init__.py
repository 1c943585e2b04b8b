"""Context compression: keep long chats inside the context window without losing what matters."""
