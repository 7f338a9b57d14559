"""Config files (YAML), validated with pydantic. ``common`` holds what daemon and gateway share."""
