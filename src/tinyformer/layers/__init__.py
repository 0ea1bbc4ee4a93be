"""Building blocks shared by the models: feed-forward networks and Transformer blocks."""
