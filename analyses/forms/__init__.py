"""The dashboard's forms, by what they are for: the recipe editor (recipe_editor) and adaptive runs (adaptive)."""
