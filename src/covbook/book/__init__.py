"""The book layer: building and publishing the HTML book from the executed notebooks."""
