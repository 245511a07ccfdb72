"""The models the book counts: published shapes (pure data: models.toml, llama3_models.toml, moe_models.toml),
a small GPT in torch, and the decoder blocks of the models people train (Llama, Mixtral-style MoE, DeepSeek's MLA)
whose saved tensors chapter 3 counts."""
