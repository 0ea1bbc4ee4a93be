"""Attention: the mask convention and multi-head attention with two backends."""
