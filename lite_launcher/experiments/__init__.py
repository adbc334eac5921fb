"""Built-in experiments; importing this package registers them."""
