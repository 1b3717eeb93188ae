"""Language-model backends that return batched next-token distributions."""
