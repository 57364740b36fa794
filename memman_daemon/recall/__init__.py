"""The recall index: every entry of a user's sessions, retrievable from any of their sessions."""
