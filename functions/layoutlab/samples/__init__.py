"""Generated, real-looking sample data (never committed): GEOS-FP-like and ATL03-like files."""
