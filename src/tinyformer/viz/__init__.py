"""Seeing inside models: attention capture, head roles, static figures, an HTML explorer."""
