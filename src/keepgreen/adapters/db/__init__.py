"""The SQLAlchemy adapter: tables, migrations and the unit of work."""
