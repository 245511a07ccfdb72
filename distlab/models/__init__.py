"""The models the book counts: published shapes (pure data, models.toml) and a small GPT in torch."""
