"""Presentations of what the services decide: formats, tables and pages, with no business rule."""
