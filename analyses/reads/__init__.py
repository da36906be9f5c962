"""The read side of the pages and the API: who may see what, and what they read (analyses, drill-downs,
recipe previews, rendered releases).
"""
