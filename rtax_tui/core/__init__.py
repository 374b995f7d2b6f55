"""The engine: no terminal, no UI. Textual and Rich are never imported from here."""
