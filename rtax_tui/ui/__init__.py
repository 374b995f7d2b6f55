"""The Textual console: run, replay and compare screens over the engine's events."""
