"""The dashboard's forms, by what they are for: the recipe editor (recipe_editor),
adaptive runs (adaptive) and the privacy officer's admin (admin)."""
