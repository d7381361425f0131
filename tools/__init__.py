"""Command-line tools and developer scripts of driverless."""
